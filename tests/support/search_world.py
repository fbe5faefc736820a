"""Sagas to search: known inputs, outputs, errors, tools, tokens and times (both databases)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.models import ApiToken, Project, Saga
from undo_core import Saga as EngineSaga
from undo_core import SagaRollbackError, define_tool

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def run(
    project: Project,
    saga_id: str,
    steps: list[tuple[str, Any, Any]],
    *,
    fail: tuple[str, Any, str] | None = None,
    name: str = "order-flow",
) -> Saga:
    """A server-run saga: each (tool, input, output) step succeeds; then ``fail`` (tool,
    input, error message) raises, and the saga rolls back."""
    saga = EngineSaga(name, saga_id=saga_id, store=DjangoStore(project))
    for tool, given, output in steps:
        saga.execute(define_tool(tool, _returns(output), lambda o, i: None), given)
    if fail is not None:
        tool, given, message = fail
        with pytest.raises(SagaRollbackError):
            saga.execute(define_tool(tool, _raises(message)), given)
    return Saga.objects.get(project=project, saga_id=saga_id)


def _returns(output: Any) -> Any:
    return lambda i: output


def _raises(message: str) -> Any:
    def boom(i: Any) -> None:
        raise ConnectionError(message)

    return boom


def build(project: Project) -> dict[str, Saga]:
    """Five sagas in ``project``; each filter of the list finds a known subset of them."""
    found = {
        "refund": run(
            project,
            "s-refund",
            [
                (
                    "refund_payment",
                    {"orderId": "o-17", "items": [{"sku": "A-1"}, {"sku": "B-2"}]},
                    {"refund": {"id": "re_1"}},
                )
            ],
        ),
        "other": run(
            project,
            "s-other",
            [("refund_payment", {"orderId": "o-170"}, {"refund": {"status": "queued"}})],
        ),
        "failed": run(
            project,
            "s-failed",
            [("reserve_stock", {"sku": "C-3"}, {"held": True})],
            fail=("charge_card", {"orderId": 17, "amount": 5}, "Gateway TIMEOUT from Acme"),
            name="checkout",
        ),
        "text17": run(project, "s-text17", [("send_email", {"orderId": "17"}, None)]),
        "nothing": run(
            project,
            "s-nothing",
            [("send_email", {"note": None, "to": "ü@example.com"}, {"ok": False})],
            name="mailer",
        ),
    }
    for n, key in enumerate(found):  # received n hours after T0, changed 10 min * n later
        Saga.objects.filter(pk=found[key].pk).update(
            received_at=T0 + timedelta(hours=n),
            changed_at=T0 + timedelta(hours=n, minutes=10 * n),
            duration_ms=n * 600_000,
        )
    token = ApiToken.objects.create(
        project=project, label="storebot", prefix=f"sb{project.pk}", secret_hash="0" * 64
    )
    Saga.objects.filter(pk__in=[found["refund"].pk, found["failed"].pk]).update(
        posted_by_token=token
    )
    return {key: Saga.objects.get(pk=saga.pk) for key, saga in found.items()}

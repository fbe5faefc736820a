"""End to end: an agent's saga waits for a person's approval given in another process.

A real ASGI server (``tests.support.live_server``) on its own database; the agent runs
StoreBot here with ``SagaboardStore`` (mirroring) and ``AsyncSagaboardGate``
(asking). refund_payment's undo needs approval: the rollback stops before it
until an approver, in a ``manage.py shell`` of the server's database, approves
through the same service the dashboard uses. Then the agent's rollback goes on
and the saga ends ROLLED_BACK, here and on the server.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.live_server import Server, manage, prepare, temp_database
from undo_core import AsyncSaga, SagaRollbackError, SagaStatus, define_tool
from undo_core.remote import AsyncSagaboardClient, AsyncSagaboardGate, SagaboardStore

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))

APPROVER = """
import time
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sagaboard.approvals.services.approvals import approval_decide
from sagaboard.models import Approval, Project

ann = get_user_model().objects.create_user("ann", password="pw-ann-123456")
ann.groups.add(Group.objects.get(name="approver"))
Project.objects.get(slug="shop").members.add(ann)
deadline = time.monotonic() + 60
while (approval := Approval.objects.filter(status="PENDING").first()) is None:
    assert time.monotonic() < deadline, "the agent never asked for approval"
    time.sleep(0.1)
outcome = approval_decide(
    approval_id=approval.pk, user=ann, decision="approve", reason="the refund was a mistake"
)
print(approval.step.tool_name, approval.plan["kind"], outcome.approval.status)
"""

TIMELINE = """
from sagaboard.models import Event
for e in Event.objects.filter(saga__saga_id="{saga_id}").order_by("id"):
    print(e.kind, e.step_id, e.to_state)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Server, str]]:
    with temp_database("postgres" if PG else "sqlite", tmp_path) as url:
        token = prepare(url)
        with Server(url) as srv:
            yield srv, token


def storebot(undone: list[str]) -> tuple[Any, Any, Any]:
    ret = define_tool(
        "return_item", lambda i: {"rma": "RMA-882"}, lambda out, i: undone.append("return_item")
    )
    ref = define_tool(
        "refund_payment",
        lambda i: {"id": "re_1", "charge": i["chargeId"]},
        lambda out: undone.append("refund_payment"),
        requires_approval=True,
    )

    def fedex(i: Any) -> None:
        raise ConnectionError("FedEx API returned 500")

    return ret, ref, define_tool("generate_label", fedex)


async def test_an_approval_given_elsewhere_lets_the_agents_rollback_finish(
    server: tuple[Server, str],
) -> None:
    srv, token = server
    undone: list[str] = []
    ret, ref, label = storebot(undone)
    with SagaboardStore(srv.url, token, flush_interval=0.01) as store:
        async with (
            AsyncSagaboardClient(srv.url, token) as client,
            AsyncSagaboardGate(client, store=store, wait_seconds=5, poll=0.2, max_wait=120) as gate,
        ):
            saga = AsyncSaga("storebot-return", store=store, gate=gate)
            approver = asyncio.create_task(
                asyncio.to_thread(manage, srv.database_url, "shell", "-c", APPROVER)
            )
            await saga.execute(ret, {"itemId": "882"})
            await saga.execute(ref, {"chargeId": "ch_123"})
            with pytest.raises(SagaRollbackError):
                await saga.execute(label, {"orderId": "o-1"})  # waits for ann's approval
            assert (await approver).splitlines()[-1] == "refund_payment client APPROVED"
        assert store.flush(timeout=30)

        assert saga.status is SagaStatus.ROLLED_BACK
        assert undone == ["refund_payment", "return_item"]
        assert saga.step("step-2").decided_by == "user:ann"
        async with AsyncSagaboardClient(srv.url, token) as client:
            mirrored = await client.get_saga(saga.id)
    assert mirrored["status"] == "ROLLED_BACK"
    assert [(s["tool_name"], s["state"], s["decided_by"]) for s in mirrored["steps"]] == [
        ("return_item", "ROLLED_BACK", None),
        ("refund_payment", "ROLLED_BACK", "user:ann"),
        ("generate_label", "FAILED", None),
    ]
    # The saga's timeline, read in the server's database (GET .../events cannot list the
    # operators' events yet: see the report), shows: asked, decided by a person, undone.
    timeline = manage(srv.database_url, "shell", "-c", TIMELINE.format(saga_id=saga.id))
    kinds = [tuple(line.split()) for line in timeline.splitlines()]
    asked = kinds.index(("step", "step-2", "AWAITING_APPROVAL"))
    requested = kinds.index(("approval.requested", "step-2", "PENDING"))
    approved = kinds.index(("approval.approve", "step-2", "APPROVED"))
    undone_at = kinds.index(("step", "step-2", "ROLLED_BACK"))
    assert asked < requested < approved < undone_at

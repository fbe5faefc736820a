"""Run in ``manage.py shell`` by the worker-crash test: a server-run saga, rollback requested.

Two steps whose undo is ``crashtest.undo`` (reserve_stock, then charge_card), then a
step that failed; requesting the rollback enqueues ``rollback_continue`` on commit.
Prints one JSON line: the saga's pk and each step's idempotency key.
"""

from __future__ import annotations

import json
import uuid

from sagaboard.models import Project, Saga
from sagaboard.record.services import manual_flow


def _eid() -> str:
    return uuid.uuid4().hex


def main(saga_id: str = "crash-1") -> None:
    project = Project.objects.create(slug="crash", name="Crash")
    manual_flow.saga_begin(project=project, event_id=_eid(), name="checkout", saga_id=saga_id)
    undo = {"kind": "handler", "handler": "crashtest.undo"}
    for tool, given, output in (
        ("reserve_stock", {"sku": "SKU-1"}, {"hold": "H-1"}),
        ("charge_card", {"amount": 40}, {"charge": "ch_1"}),
    ):
        step_id = manual_flow.step_add(
            project=project, event_id=_eid(), saga_id=saga_id, tool_name=tool, input=given,
            undo=undo,
        )  # fmt: skip
        manual_flow.step_complete(
            project=project, event_id=_eid(), saga_id=saga_id, step_id=step_id, output=output
        )
    ship = manual_flow.step_add(
        project=project, event_id=_eid(), saga_id=saga_id, tool_name="ship", input={},
        undo={"kind": "none"},
    )  # fmt: skip
    manual_flow.step_fail(
        project=project, event_id=_eid(), saga_id=saga_id, step_id=ship, error="carrier down"
    )
    manual_flow.saga_rollback_request(
        project=project, event_id=_eid(), saga_id=saga_id, reason="shipping failed", actor=None
    )
    saga = Saga.objects.get(project=project, saga_id=saga_id)
    keys = {s.step_id: s.idempotency_key for s in saga.steps.all()}
    print(json.dumps({"saga_pk": saga.pk, "status": saga.status, "keys": keys}))

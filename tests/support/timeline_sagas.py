"""A long saga written straight into the tables (fast, any size), for the timeline's tests.

``big_saga(project, "big-1", 1000)``: steps 1..n-1 ran (a few milliseconds each, every
hundredth for seconds), step n failed, the rollback undid n-1 down to the middle step,
whose undo failed twice and now waits for an operator (the saga ROLLBACK_FAILED); the
step after the middle one waited for an approval (approved) before its undo ran.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from sagaboard.models import Approval, CompensationAttempt, Project, Saga, Step


def _ms(n: float) -> timedelta:
    return timedelta(milliseconds=n)


def big_saga(project: Project, saga_id: str, n: int, *, start: datetime | None = None) -> Saga:
    """The saga, begun at ``start`` (a minute ago by default: its wait is still short)."""
    start = start or timezone.now() - timedelta(minutes=1)
    middle = n // 2
    saga = Saga.objects.create(
        project=project, saga_id=saga_id, name="bulk-import", status="ROLLBACK_FAILED",
        created_at=start, updated_at=start, failed_step=f"step-{n}", waiting_for="OPERATOR",
    )  # fmt: skip
    steps, at = [], start
    for i in range(1, n + 1):
        took = _ms(2000 if i % 100 == 0 else 3 + i % 7)
        state = "COMPLETED" if i < middle else "ROLLED_BACK"
        state = {middle: "ROLLBACK_FAILED", n: "FAILED"}.get(i, state)
        steps.append(
            Step(
                saga=saga, step_id=f"step-{i}", position=i, tool_name=f"import_row_{i % 5}",
                state=state, input={"row": i}, output=None if i == n else {"ok": True},
                error="disk full" if i in (middle, n) else None, idempotency_key=f"{saga_id}:{i}",
                created_at=at, completed_at=None if i == n else at + took, updated_at=at + took,
            )
        )  # fmt: skip
        at += took + _ms(1)
    Step.objects.bulk_create(steps)
    by_id = {s.step_id: s for s in Step.objects.filter(saga=saga)}
    attempts = []
    for i in range(n - 1, middle - 1, -1):  # the rollback, newest step first
        if i == middle + 1:  # its undo waited for an approver first
            Approval.objects.create(
                project=project, saga=saga, step=by_id[f"step-{i}"], status="APPROVED",
                why="refund over 100",
                plan={}, plan_hash="x", created_at=at, decided_at=at + timedelta(seconds=30),
            )  # fmt: skip
            at += timedelta(seconds=30)
        tries = 2 if i == middle else 1
        for number in range(1, tries + 1):
            outcome = "failed" if i == middle else "succeeded"
            attempts.append(
                CompensationAttempt(
                    step=by_id[f"step-{i}"], number=number, started_at=at,
                    finished_at=at + _ms(2), outcome=outcome,
                    error="disk full" if outcome == "failed" else None,
                )
            )  # fmt: skip
            at += _ms(3)
    CompensationAttempt.objects.bulk_create(attempts)
    Saga.objects.filter(pk=saga.pk).update(updated_at=at)
    return saga

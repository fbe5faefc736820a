"""Many failed undos at once, for batch operations' tests and benchmark.

Rows written directly (``bulk_create``), as an agent's mirrored sagas would leave them:
each saga ROLLBACK_FAILED on one step whose undo failed. The agent runs these sagas
(driver ``client``), so a retry or a resolve is a request the agent's SDK picks up:
nothing runs in-process, and what a batch costs is sagaboard's own work.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sagaboard.models import Project, Saga, Step


def failed_undos(
    project: Project, n: int, *, tool: str = "refund_payment", prefix: str = "bf"
) -> list[Step]:
    """``n`` sagas of ``project``, each halted on one failed undo of ``tool``; the steps."""
    now = datetime.now(UTC)
    sagas = Saga.objects.bulk_create(
        (
            Saga(project=project, saga_id=f"{prefix}-{i}", name=f"{prefix}-flow",
                 status="ROLLBACK_FAILED", driver=Saga.Driver.CLIENT, created_at=now,
                 updated_at=now, failed_step="step-2", waiting_for="OPERATOR")
            for i in range(n)
        ),
        batch_size=1000,
    )  # fmt: skip
    if not sagas[0].pk:  # databases that do not return keys from a bulk insert
        sagas = list(Saga.objects.filter(project=project, saga_id__startswith=f"{prefix}-"))
    Step.objects.bulk_create(
        (
            Step(saga=s, step_id="step-1", position=1, tool_name=tool, state="ROLLBACK_FAILED",
                 error="HTTP 503 from the payments API", error_type="HTTPError",
                 idempotency_key=f"{s.saga_id}:step-1", created_at=now, updated_at=now)
            for s in sagas
        ),
        batch_size=1000,
    )  # fmt: skip
    return list(Step.objects.filter(saga__in=sagas).order_by("pk"))

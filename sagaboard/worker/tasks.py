"""Celery tasks: thin adapters that call the features' services (runner, approvals, notifications).

Services ask for these by name (``sagaboard.infra.jobs``); the names are fixed there.
Every task is acknowledged late. A worker killed mid-undo leaves its saga's lease
behind: on the same host the next worker sees the owner's process is gone and
takes over at once, elsewhere when the lease lapses; the periodic sweep finds
such sagas (and operators' requests whose task was lost) and queues them again,
and the engine re-runs the interrupted undo with the same idempotency key. A
saga held by another live worker is retried after a pause.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings

from sagaboard.actions.services import batch_outcomes, runner, saga_stop
from sagaboard.approvals.services import approvals
from sagaboard.batches.services import batches
from sagaboard.health.services import retention, tool_rollup
from sagaboard.infra import jobs
from sagaboard.notify.services import notifications


@shared_task(name=jobs.ROLLBACK_CONTINUE, bind=True, acks_late=True, max_retries=None)
def rollback_continue(self: Any, saga_pk: int) -> str:
    try:
        return runner.rollback_continue(saga_pk)
    except runner.Busy as busy:
        raise self.retry(countdown=busy.retry_in) from busy


@shared_task(name=jobs.STEP_ACTION_RUN, bind=True, acks_late=True, max_retries=None)
def step_action_run(self: Any, step_pk: int) -> str:
    try:
        return runner.step_action_run(step_pk)
    except runner.Busy as busy:
        raise self.retry(countdown=busy.retry_in) from busy


@shared_task(name=jobs.STOP_RUN, bind=True, acks_late=True, max_retries=None)
def stop_run(self: Any, saga_pk: int) -> str:
    try:
        return runner.stop_run(saga_pk)
    except runner.Busy as busy:
        raise self.retry(countdown=busy.retry_in) from busy


@shared_task(name=jobs.BATCH_RUN, acks_late=True)
def batch_run(job_pk: int) -> str:
    """A batch job's items, chunk by chunk; a job another live worker holds is left to it
    (the sweep queues it again if that worker dies)."""
    return batches.batch_run(job_pk)


@shared_task(name=jobs.NOTIFICATION_SEND, acks_late=True)
def notification_send(pk: int) -> bool:
    return notifications.notification_send(pk)


@shared_task(name=jobs.SWEEP)
def sweep() -> dict[str, int]:
    """Every few seconds: void approvals whose step settled, expire approvals, resend
    notifications, pick up orphaned work."""
    # Every project's: a worker's task voids its saga's as it ends, but a step can settle
    # with none ending after it (a worker killed in between, the agent's own events). Before
    # the expiry, which would otherwise escalate (or reject) an approval that is for nothing.
    voided = approvals.approvals_void_settled()
    expired = approvals.approvals_expire()
    due = notifications.notifications_due()
    for pk in due:
        notification_send.delay(pk)
    orphans = runner.orphaned_work()
    tasks = {"saga": rollback_continue, "step": step_action_run, "stop": stop_run}
    for kind, pk in orphans:
        tasks[kind].delay(pk)
    overdue = saga_stop.requests_overdue()
    stalled = batches.batch_orphans()
    for pk in stalled:
        batch_run.delay(pk)
    settled = batch_outcomes.jobs_settle()
    return {
        "approvals_voided": voided,
        "expired": expired,
        "notifications": len(due),
        "orphans": len(orphans),
        "stops_overdue": overdue,
        "batches": len(stalled),
        "batch_outcomes": settled,
    }


@shared_task(name=jobs.RETENTION_SWEEP)
def retention_sweep(max_batches: int = 100) -> dict[str, Any]:
    """Daily: delete finished sagas older than SAGABOARD_RETENTION_DAYS (0: off).

    At most ``max_batches`` batches a run, so a first run over a long backlog does not
    hold a worker for hours: if more are left, it queues itself again (behind any undos
    queued meanwhile).
    """
    days = settings.SAGABOARD_RETENTION_DAYS
    if days <= 0:
        return {"off": True}
    report = retention.retention_run(older_than=timedelta(days=days), max_batches=max_batches)
    if report.more:
        retention_sweep.apply_async(kwargs={"max_batches": max_batches}, countdown=1)
    return report.counts()


@shared_task(name=jobs.TOOL_ROLLUP_FOLD)
def tool_rollup_fold() -> dict[str, Any]:
    """Every SAGABOARD_ROLLUP_SECONDS: fold changed sagas into the per-tool health rollups."""
    return tool_rollup.rollup_fold().counts()

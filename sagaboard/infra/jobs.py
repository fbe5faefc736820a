"""Background work, asked for by name: the only code that puts a task on the queue.

Services say *what* should run later (``rollback_continue(saga_pk)``); a worker's
task of that name (``sagaboard.worker.tasks``) carries it out. Naming the task here
instead of importing it keeps the worker above the services: tasks call services, and
services never import tasks.

Everything is enqueued when the current transaction commits, so a change that is
rolled back never reaches a worker, and a worker never reads a row before it exists.
The database is the outbox: what a task would do is already recorded (an approved
undo, a retry asked for, a stop request, an undelivered notification), and the beat's
sweep queues it again when nothing has taken it up. So a broker that is down when the
change commits loses nothing: the request still succeeds (the change *was* made),
a warning is logged, and the sweep queues the work once the broker is back.
The names are stable across releases: messages already on a broker at an upgrade
still find their task.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerUnavailable

log = logging.getLogger("sagaboard.infra.jobs")

ROLLBACK_CONTINUE = "sagaboard.tasks.rollback_continue"
STEP_ACTION_RUN = "sagaboard.tasks.step_action_run"
STOP_RUN = "sagaboard.tasks.stop_run"
NOTIFICATION_SEND = "sagaboard.tasks.notification_send"
SWEEP = "sagaboard.tasks.sweep"
RETENTION_SWEEP = "sagaboard.tasks.retention_sweep"
TOOL_ROLLUP_FOLD = "sagaboard.tasks.tool_rollup_fold"
BATCH_RUN = "sagaboard.tasks.batch_run"


def rollback_continue(saga_pk: int) -> None:
    """Run (or go on with) the undos of a saga sagaboard runs."""
    _on_commit(ROLLBACK_CONTINUE, saga_pk)


def step_action_run(step_pk: int) -> None:
    """Carry out an operator's retry or force-resolve of one failed undo."""
    _on_commit(STEP_ACTION_RUN, step_pk)


def stop_run(saga_pk: int) -> None:
    """Carry out an operator's rollback request of a running saga sagaboard runs."""
    _on_commit(STOP_RUN, saga_pk)


def batch_run(job_pk: int) -> None:
    """Process (or go on with) a batch job's items (``sagaboard.batches.services.batches``)."""
    _on_commit(BATCH_RUN, job_pk)


def notification_send(notification_pk: int) -> None:
    """Deliver one outbox notification (retried by the sweep until delivered)."""
    _on_commit(NOTIFICATION_SEND, notification_pk)


def enqueue_now(name: str, *args: Any, countdown: float | None = None) -> None:
    """Queue the task ``name`` at once, outside any transaction (the sweep's own work)."""
    # By the registered task (not ``send_task``), so eager mode runs it in this process.
    current_app.tasks[name].apply_async(args=args, countdown=countdown)


def _on_commit(name: str, *args: Any) -> None:
    transaction.on_commit(lambda: _enqueue_committed(name, *args))


def _enqueue_committed(name: str, *args: Any) -> None:
    """After the commit: queue the task, or leave it to the sweep if the broker is away."""
    try:
        enqueue_now(name, *args)
    except (BrokerUnavailable, OSError) as err:
        log.warning(
            "the broker is unavailable (%s); %s%r is recorded and the sweep will queue it",
            err, name, args,
        )  # fmt: skip

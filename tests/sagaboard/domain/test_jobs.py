"""``domain.jobs``: services queue work by task name, and only once their transaction commits."""

from __future__ import annotations

from typing import Any

import pytest
from celery import current_app
from django.db import transaction

from sagaboard.domain import jobs

pytestmark = pytest.mark.django_db(transaction=True)

NAMES = [jobs.ROLLBACK_CONTINUE, jobs.STEP_ACTION_RUN, jobs.NOTIFICATION_SEND, jobs.SWEEP,
         jobs.RETENTION_SWEEP]  # fmt: skip


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """What reached the queue (Celery's ``apply_async``), by task name."""
    seen: list[tuple[str, tuple[Any, ...]]] = []
    for name in NAMES:
        task = current_app.tasks[name]
        monkeypatch.setattr(
            task, "apply_async",
            lambda args=(), countdown=None, name=name, **_: seen.append((name, tuple(args))),
        )  # fmt: skip
    return seen


@pytest.mark.parametrize("name", NAMES)
def test_every_job_name_is_a_task_the_worker_has(name: str) -> None:
    assert current_app.tasks[name].name == name


def test_a_job_asked_for_in_a_transaction_waits_for_its_commit(queued: list[Any]) -> None:
    with transaction.atomic():
        jobs.rollback_continue(7)
        jobs.step_action_run(8)
        assert queued == []
    assert queued == [(jobs.ROLLBACK_CONTINUE, (7,)), (jobs.STEP_ACTION_RUN, (8,))]


def test_a_job_asked_for_in_a_rolled_back_transaction_never_runs(queued: list[Any]) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        jobs.notification_send(3)
        raise RuntimeError("the change failed")
    assert queued == []

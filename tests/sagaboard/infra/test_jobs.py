"""``infra.jobs``: services queue work by task name, and only once their transaction commits."""

from __future__ import annotations

from typing import Any

import pytest
from celery import current_app
from django.db import transaction

from sagaboard.infra import jobs

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


def test_a_broker_down_at_commit_keeps_the_change_and_leaves_the_work_to_the_sweep(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from kombu.exceptions import OperationalError

    from sagaboard.models import Project

    def refused(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("[Errno 111] Connection refused")

    monkeypatch.setattr(current_app.tasks[jobs.ROLLBACK_CONTINUE], "apply_async", refused)
    with transaction.atomic():  # the service's change, then the job it asks for
        Project.objects.create(slug="kept", name="Kept")
        jobs.rollback_continue(7)
    assert Project.objects.filter(slug="kept").exists()
    assert "the broker is unavailable" in caplog.text and "the sweep will queue it" in caplog.text


def test_an_unexpected_error_while_queuing_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise TypeError("a bug, not an outage")

    monkeypatch.setattr(current_app.tasks[jobs.ROLLBACK_CONTINUE], "apply_async", broken)
    with pytest.raises(TypeError), transaction.atomic():
        jobs.rollback_continue(7)

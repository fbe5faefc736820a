"""Batch jobs report outcomes, not requests (issue 31): a retry the job asked for is "still
running" until the undo it started has ended, then undone or failed again (with the error);
a refused item is skipped (with why); the job is finishing, not finished, until the last
undo it started has ended, on the job page (which keeps polling), in the API and in the audit.

Run as a worker would: the job's task, then the tasks its requests queued (the chain)."""

from __future__ import annotations

from typing import Any

import pytest
from celery import current_app
from django.db import connection
from django.http import QueryDict
from django.test import Client
from django.test.utils import CaptureQueriesContext

from sagaboard.access.services.tokens import token_create
from sagaboard.actions.services import batch_outcomes, runner, saga_stop
from sagaboard.batches.services import batches
from sagaboard.engine.services import undo_kinds
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.infra import jobs, permalinks
from sagaboard.models import AuditEntry, BatchJob, Project, Saga, Step
from tests.support.batch_world import failed_undos
from tests.support.hitl import person, storebot_server_saga, waiting
from undo_core import Saga as EngineSaga
from undo_core import define_tool

pytestmark = pytest.mark.django_db
verified = pytest.mark.usefixtures("record_verified")  # sagas with an event log: it replays

HTMX = {"HX-Request": "true"}
RESERVE = define_tool("deduct_inventory", lambda inp: {"reserved": True}, lambda out: None)


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """What services put on the queue, in order: the test runs each task as a worker would."""
    seen: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(jobs, "_on_commit", lambda name, *args: seen.append((name, args)))
    return seen


def work(queued: list[tuple[str, tuple[Any, ...]]], name: str) -> list[Any]:
    """Run (and take off the queue) every queued task called ``name``: the real task."""
    mine = [args for n, args in queued if n == name]
    queued[:] = [(n, args) for n, args in queued if n != name]
    return [current_app.tasks[name].apply(args=args).get() for args in mine]


def stuck(shop: Project, saga_id: str, fails: int) -> Step:
    """A saga sagaboard runs, halted ROLLBACK_FAILED on return_item's undo (which fails its
    first ``fails`` attempts); the step."""
    saga = storebot_server_saga(shop, saga_id, refund_needs_approval=False,
                                return_fails_first=fails)  # fmt: skip
    assert runner.rollback_continue(saga.pk) == "ROLLBACK_FAILED"
    return Step.objects.get(saga=saga, tool_name="return_item")


def agent_gone(shop: Project, operator: Any, saga_id: str = "gone") -> Step:
    """A step whose undo lives in an agent's process that is gone: a retry cannot run it."""
    engine = EngineSaga("checkout-flow", saga_id=saga_id, store=DjangoStore(shop))
    engine.execute(RESERVE, {"sku": "xyz"})
    engine.release()
    saga = Saga.objects.get(project=shop, saga_id=saga_id)
    saga_stop.rollback_request(saga_pk=saga.pk, user=operator, reason="customer cancelled")
    assert runner.stop_run(saga.pk) == "ROLLBACK_FAILED"
    return Step.objects.get(saga=saga, tool_name="deduct_inventory")


def retry_all(user: Any, expected: int) -> BatchJob:
    return batches.batch_create(user=user, action="retry", query=QueryDict("project=shop"),
                                reason="payments API back", expected=expected)  # fmt: skip


def outcomes(job: BatchJob) -> dict[int, tuple[str, str]]:
    return {i.target_pk: (i.outcome, i.message) for i in job.items.all()}


def api_get(shop: Project, job: BatchJob, query: str = "", token: str = "") -> dict[str, Any]:
    token = token or token_create(project=shop, label="ops").secret
    answer = Client().get(f"/api/v1/batches/{job.pk}{query}",
                          headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert answer.status_code == 200, answer.content
    return answer.json()


@verified
def test_a_batch_retry_reports_what_each_undo_came_to_once_it_has_ended(
    shop: Project, queued: list[Any]
) -> None:
    ok, bad = stuck(shop, "s-ok", fails=1), stuck(shop, "s-bad", fails=99)
    olga = person("olga", "operator", shop)
    gone = agent_gone(shop, olga)
    queued.clear()  # what setting the world up asked for (it ran it itself)
    job = retry_all(olga, expected=3)

    # The job: every request made, none of their undos run yet. Not finished.
    assert work(queued, jobs.BATCH_RUN) == ["finishing"]
    job.refresh_from_db()
    assert (job.state, job.done, job.finished_at) == ("finishing", 3, None)
    assert job.counts == {"requested": 2, "refused": 1}
    said = outcomes(job)
    assert said[ok.pk] == ("requested", "retry queued for a worker")
    assert said[gone.pk][0] == "refused"
    assert said[gone.pk][1].startswith("a retry cannot run this undo: the undo of ")
    client = Client()
    client.force_login(olga)
    progress = client.get(f"/batch/{job.pk}/progress/", headers=HTMX)
    body = progress.content.decode()
    assert progress.status_code == 200 and 'hx-trigger="every 1s"' in body  # still polling
    assert 'data-state="finishing"' in body and "2 still running" in body
    assert "1 of 3</strong> outcomes known" in body and "Requests made: 3 of 3" in body
    assert api_get(shop, job)["totals"] == {
        "succeeded": 0, "failed_again": 0, "skipped": 1, "running": 2,
        "waiting_for_approver": 0, "not_started": 0,
    }  # fmt: skip

    # The chain: the worker runs the undos the job's requests queued, one after the other.
    assert queued == [(jobs.STEP_ACTION_RUN, (ok.pk,)), (jobs.STEP_ACTION_RUN, (bad.pk,))]
    first, rest = queued[:1], queued[1:]
    queued[:] = first
    assert work(queued, jobs.STEP_ACTION_RUN) == ["ROLLED_BACK"]
    job.refresh_from_db()
    assert job.state == "finishing" and job.counts == {"succeeded": 1, "requested": 1,
                                                        "refused": 1}  # fmt: skip
    assert outcomes(job)[ok.pk] == ("succeeded", "the undo ran again: ROLLED_BACK")
    assert not AuditEntry.objects.filter(action="batch.finish").exists()
    queued[:] = rest
    assert work(queued, jobs.STEP_ACTION_RUN) == ["ROLLBACK_FAILED"]

    # Every undo the job started has ended: finished, with every item's outcome.
    job.refresh_from_db()
    assert job.state == "finished" and job.finished_at is not None
    assert job.counts == {"succeeded": 1, "failed": 1, "refused": 1}
    result, detail = outcomes(job)[bad.pk]
    assert result == "failed"
    assert detail.startswith("the undo failed again: the step is ROLLBACK_FAILED: ")
    assert "upstream timed out" in detail
    finish = AuditEntry.objects.get(action="batch.finish")
    assert finish.data["counts"] == {"succeeded": 1, "failed": 1, "refused": 1}

    # The job page: its totals, every item's result in words, a link to the failed one.
    done = client.get(f"/batch/{job.pk}/progress/", headers=HTMX)
    assert done.status_code == 286 and "every 1s" not in done.content.decode()
    page = client.get(f"/batch/{job.pk}/").content.decode()
    for key, n in [("succeeded", 1), ("failed", 1), ("refused", 1), ("requested", 0)]:
        assert f'data-count="{key}"><strong>{n}</strong>' in page
    assert "1</strong> undone" in page and "1</strong> failed again" in page
    assert "1</strong> skipped" in page and "0</strong> still running" in page
    link = permalinks.step_path("shop", "s-bad", bad.step_id)
    failed_rows = client.get(f"/batch/{job.pk}/?outcome=failed").content.decode()
    assert failed_rows.count('class="batch-item outcome-') == 1
    assert f'<a href="{link}" class="batch-failed-link">open the step</a>' in failed_rows
    assert "upstream timed out" in failed_rows and "failed again" in failed_rows
    assert "a retry cannot run this undo" in page and ">skipped<" in page

    # The API's job JSON says the same.
    answer = api_get(shop, job)
    assert (answer["state"], answer["outcomes_known"], answer["known"]) == ("finished", True, 3)
    assert answer["totals"] == {
        "succeeded": 1, "failed_again": 1, "skipped": 1, "running": 0,
        "waiting_for_approver": 0, "not_started": 0,
    }  # fmt: skip
    assert answer["succeeded_means"] == "undone"
    items = {i["target_id"]: i for i in answer["items"]}
    assert (items[ok.pk]["result"], items[ok.pk]["result_label"]) == ("succeeded", "undone")
    assert items[bad.pk]["result"] == "failed_again" and items[bad.pk]["url"] == link
    assert "upstream timed out" in items[bad.pk]["detail"]
    assert items[bad.pk]["saga_id"] == "s-bad" and items[bad.pk]["step_id"] == bad.step_id
    assert items[gone.pk]["result"] == "skipped"
    assert items[gone.pk]["detail"].startswith("a retry cannot run this undo: ")
    only = api_get(shop, job, "?result=failed_again")["items"]
    assert [i["target_id"] for i in only] == [bad.pk]


@verified
def test_while_its_undo_runs_the_item_is_running_and_the_job_not_finished(
    shop: Project, queued: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    step = stuck(shop, "s-1", fails=1)
    olga = person("olga", "operator", shop)
    queued.clear()
    job = retry_all(olga, expected=1)
    work(queued, jobs.BATCH_RUN)
    client = Client()
    client.force_login(olga)
    seen: list[Any] = []
    real = undo_kinds.handlers()["storebot.return_item"]

    def look_while_undoing(*args: Any, **kw: Any) -> Any:  # the retry's undo, running
        seen.append(Step.objects.get(pk=step.pk).state)
        seen.append(client.get(f"/batch/{job.pk}/progress/", headers=HTMX))
        return real(*args, **kw)

    monkeypatch.setitem(undo_kinds._HANDLERS, "storebot.return_item", look_while_undoing)
    assert work(queued, jobs.STEP_ACTION_RUN) == ["ROLLED_BACK"]
    state, during = seen
    assert state == "COMPENSATING"
    assert during.status_code == 200 and 'hx-trigger="every 1s"' in during.content.decode()
    assert 'data-state="finishing"' in during.content.decode()
    assert "1 still running" in during.content.decode()
    job.refresh_from_db()
    assert job.state == "finished" and outcomes(job)[step.pk][0] == "succeeded"


@verified
def test_a_batch_approval_follows_the_undo_it_let_run_to_its_outcome(
    shop: Project, queued: list[Any]
) -> None:
    a1, _ = waiting(shop, "s-1"), waiting(shop, "s-2")
    queued.clear()
    approver = person("ap-1", "approver", shop)
    job = batches.batch_create(user=approver, action="approve", query=QueryDict("project=shop"),
                               reason="refunds are fine", expected=2)  # fmt: skip
    assert work(queued, jobs.BATCH_RUN) == ["finishing"]
    assert BatchJob.objects.get(pk=job.pk).counts == {"requested": 2}
    assert [name for name, _ in queued] == [jobs.ROLLBACK_CONTINUE] * 2
    rest = queued[1:]
    queued[:] = queued[:1]
    work(queued, jobs.ROLLBACK_CONTINUE)  # s-1's undos run: refund_payment, then the rest
    assert batch_outcomes.jobs_settle() == 1  # the sweep reads it
    job.refresh_from_db()
    assert job.state == "finishing" and job.counts == {"succeeded": 1, "requested": 1}
    assert outcomes(job)[a1.pk] == ("succeeded", "approved, and the undo ran: ROLLED_BACK")
    queued[:] = rest
    work(queued, jobs.ROLLBACK_CONTINUE)
    answer = api_get(shop, job)  # read: settled then and there
    assert answer["state"] == "finished" and answer["totals"]["succeeded"] == 2
    assert answer["succeeded_means"] == "undone"


@verified
def test_a_cancelled_job_still_follows_what_it_asked_for(
    shop: Project, queued: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = stuck(shop, "s-1", fails=1), stuck(shop, "s-2", fails=1)
    olga = person("olga", "operator", shop)
    job = retry_all(olga, expected=2)
    real = batches._chunk_run

    def cancel_after_the_first(*args: Any) -> Any:
        done = real(*args)
        batches.batch_cancel(user=olga, pk=job.pk)
        return done

    monkeypatch.setattr(batches, "_chunk_run", cancel_after_the_first)
    assert batches.batch_run(job.pk, chunk=1) == "finishing"
    job.refresh_from_db()
    assert (job.done, job.running, job.cancelled_by) == (1, 1, "user:olga")
    queued[:] = [q for q in queued if q[0] == jobs.STEP_ACTION_RUN]
    assert work(queued, jobs.STEP_ACTION_RUN) == ["ROLLED_BACK"]
    job.refresh_from_db()
    assert job.state == "cancelled" and job.counts == {"succeeded": 1}
    assert outcomes(job)[second.pk] == ("", "")  # never asked
    assert AuditEntry.objects.filter(action="batch.cancelled").count() == 1
    assert Step.objects.get(pk=first.pk).state == "ROLLED_BACK"


def test_an_agents_retry_is_reported_when_the_agent_acknowledges_it(
    shop: Project, queued: list[Any]
) -> None:
    from sagaboard.actions.services import decisions

    steps = failed_undos(shop, 2)  # sagas their agent runs: its SDK carries a retry out
    olga = person("olga", "operator", shop)
    job = retry_all(olga, expected=2)
    assert batches.batch_run(job.pk) == "finishing"
    assert batch_outcomes.jobs_settle() == 0  # the agent has not acted: still running
    for step, state in zip(steps, ["ROLLED_BACK", "ROLLBACK_FAILED"], strict=True):
        # The agent ran the undo (its events mirrored), then acknowledges the retry.
        Step.objects.filter(pk=step.pk).update(state=state, error="HTTP 502 again")
        decisions.decision_ack(project=shop, token=None, saga_id=step.saga.saga_id,
                               step_id=step.step_id, action="retry")  # fmt: skip
    job.refresh_from_db()
    assert job.state == "finished" and job.counts == {"succeeded": 1, "failed": 1}
    assert outcomes(job)[steps[1].pk] == (
        "failed",
        "the undo failed again: the step is ROLLBACK_FAILED: HTTP 502 again",
    )


def test_reading_a_job_costs_the_same_queries_whatever_its_size(
    shop: Project, queued: list[Any]
) -> None:
    olga = person("olga", "operator", shop)
    client = Client()
    client.force_login(olga)
    token = token_create(project=shop, label="ops").secret
    bearer = {"Authorization": f"Bearer {token}"}
    assert Client().get("/api/v1/batches/1", headers=bearer).status_code == 404  # first use
    counts = []
    for n, prefix in [(2, "a"), (20, "b")]:
        steps = failed_undos(shop, n, prefix=prefix)
        job = batches.batch_create(
            user=olga,
            action="retry",
            reason="r",
            query=QueryDict(f"project=shop&q={prefix}-"),
            expected=n,
        )
        batches.batch_run(job.pk)  # fmt: skip
        done = [s.pk for s in steps[: n // 2]]  # half of them ended, unseen so far
        Step.objects.filter(pk__in=done).update(state="ROLLED_BACK", pending_action=None)
        with CaptureQueriesContext(connection) as page:
            assert client.get(f"/batch/{job.pk}/").status_code == 200
        with CaptureQueriesContext(connection) as api:
            api_get(shop, job, token=token)
        assert BatchJob.objects.get(pk=job.pk).counts == {"succeeded": n // 2,
                                                          "requested": n - n // 2}  # fmt: skip
        counts.append((len(page), len(api)))
    assert counts[0] == counts[1], counts


@verified
def test_with_tasks_run_at_once_the_job_finishes_with_every_outcome(
    shop: Project, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    """``SAGABOARD_TASKS_EAGER`` (the demo): each chunk's undos run as it commits."""
    ok, bad = stuck(shop, "s-ok", fails=1), stuck(shop, "s-bad", fails=99)
    olga = person("olga", "operator", shop)
    settings.CELERY_TASK_ALWAYS_EAGER = True
    with django_capture_on_commit_callbacks(execute=True):
        job = retry_all(olga, expected=2)
    job.refresh_from_db()
    assert job.state == "finished" and job.counts == {"succeeded": 1, "failed": 1}
    assert [outcomes(job)[s.pk][0] for s in (ok, bad)] == ["succeeded", "failed"]

"""Batch operations over a filter: frozen items, chunks, cancel, resume, per-item re-checks."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest
from django.db import connection
from django.http import QueryDict

from sagaboard.actions.services import decisions, operator_actions
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.batches.services import batches
from sagaboard.infra import jobs
from sagaboard.models import Approval, AuditEntry, BatchItem, BatchJob, Project, Step
from tests.support.batch_world import failed_undos
from tests.support.hitl import person, waiting
from tests.support.racing import Start

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def operator(shop: Project) -> Any:
    return person("op-1", "operator", shop)


@pytest.fixture(autouse=True)
def no_worker(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """Jobs are queued, not run: each test runs ``batch_run`` itself, as a worker would."""
    queued: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(jobs, "_on_commit", lambda name, *args: queued.append((name, args)))
    return queued


def q(text: str = "") -> QueryDict:
    return QueryDict(text)


def create(user: Any, action: str = "leave", query: str = "", **kw: Any) -> BatchJob:
    return batches.batch_create(
        user=user, action=action, query=q(query), reason=kw.pop("reason", "known outage"),
        expected=kw.pop("expected", None),
    )  # fmt: skip


def test_the_preview_counts_every_match_not_just_a_page_and_samples_ten(
    shop: Project, operator: Any
) -> None:
    failed_undos(shop, 250)
    failed_undos(shop, 5, tool="ship_parcel", prefix="other")
    preview = batches.batch_preview(user=operator, action="retry", query=q("tool=refund_payment"))
    assert preview.count == 250
    assert len(preview.sample) == batches.SAMPLE
    assert preview.sample[0].startswith("refund_payment (step-1) in bf-flow [bf-")
    assert preview.query == "tool=refund_payment"


def test_the_items_are_frozen_at_confirm_time_and_scoped_to_the_users_projects(
    shop: Project, operator: Any, no_worker: list[Any]
) -> None:
    other = Project.objects.create(slug="other", name="Other")
    mine = failed_undos(shop, 12)
    failed_undos(other, 7, prefix="theirs")
    job = create(operator, "leave", expected=12)
    assert (job.total, job.state, job.query) == (12, "queued", "")
    items = list(job.items.order_by("position"))
    assert [i.target_pk for i in items] == [s.pk for s in mine]
    assert {i.project_id for i in items} == {shop.pk}
    assert list(job.projects.all()) == [shop]
    assert no_worker == [(jobs.BATCH_RUN, (job.pk,))]
    # A failure arriving after the confirm is not in the job.
    failed_undos(shop, 3, prefix="late")
    assert batches.batch_run(job.pk, chunk=5) == "finished"
    job.refresh_from_db()
    assert (job.done, job.counts) == (12, {"succeeded": 12})
    assert Step.objects.filter(saga__project=shop, left_at__isnull=True).count() == 3


def test_a_changed_count_since_the_confirm_page_is_refused_with_409(
    shop: Project, operator: Any
) -> None:
    failed_undos(shop, 4)
    with pytest.raises(DecisionRefused) as refused:
        create(operator, "retry", expected=3)
    assert refused.value.status == 409 and "4 match now, 3 confirmed" in refused.value.message
    assert not BatchJob.objects.exists()


@pytest.mark.parametrize(
    ("action", "query", "reason", "status", "field"),
    [
        ("explode", "", "r", 400, "action"),
        ("retry", "", "", 400, "reason"),
        ("retry", "since=forever", "r", 400, "since"),
        ("retry", "project=nope", "r", 400, None),  # nothing matches
        ("approve", "", "r", 403, None),  # an operator is no approver
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(
    shop: Project, operator: Any, action: str, query: str, reason: str, status: int,
    field: str | None,
) -> None:  # fmt: skip
    failed_undos(shop, 2)
    with pytest.raises(DecisionRefused) as refused:
        create(operator, action, query, reason=reason)
    assert (refused.value.status, refused.value.field) == (status, field)
    assert not BatchJob.objects.exists()


def test_chunks_record_progress_and_the_job_is_audited_as_one_operation_with_its_items(
    shop: Project, operator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed_undos(shop, 7)
    job = create(operator, "resolve", reason="refunded by hand")
    seen: list[int] = []
    real = batches._chunk_run

    def chunk(*args: Any) -> Any:
        done = real(*args)
        seen.append(BatchJob.objects.get(pk=job.pk).done)
        return done

    monkeypatch.setattr(batches, "_chunk_run", chunk)
    # Every request made; the agent's SDK carries a resolve out: not finished until it has.
    assert batches.batch_run(job.pk, chunk=3) == "finishing"
    assert seen == [3, 6, 7]
    job.refresh_from_db()
    assert job.counts == {"requested": 7}
    assert job.lease_owner is None and job.finished_at is None
    for step in Step.objects.filter(saga__project=shop):  # the agent resolves, acknowledges
        Step.objects.filter(pk=step.pk).update(state="RESOLVED")
        decisions.decision_ack(project=shop, token=None, saga_id=step.saga.saga_id,
                               step_id=step.step_id, action="resolve")  # fmt: skip
    job.refresh_from_db()
    assert (job.state, job.counts) == ("finished", {"succeeded": 7})
    actions = list(AuditEntry.objects.filter(data__contains=f'"batch": {job.pk}')
                   .values_list("action", flat=True))  # fmt: skip
    assert sorted(actions) == ["batch.finish", "batch.start", *["step.resolve"] * 7]


def test_cancel_stops_between_chunks_and_leaves_the_rest_undone(
    shop: Project, operator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed_undos(shop, 10)
    job = create(operator, "leave")
    real = batches._chunk_run

    def cancel_after_first_chunk(*args: Any) -> Any:
        done = real(*args)
        if BatchJob.objects.get(pk=job.pk).done == 4:
            batches.batch_cancel(user=operator, pk=job.pk)
        return done

    monkeypatch.setattr(batches, "_chunk_run", cancel_after_first_chunk)
    assert batches.batch_run(job.pk, chunk=4) == "cancelled"
    job.refresh_from_db()
    assert (job.state, job.done, job.cancelled_by) == ("cancelled", 4, "user:op-1")
    assert job.items.filter(outcome="").count() == 6
    assert Step.objects.filter(left_at__isnull=False).count() == 4
    with pytest.raises(DecisionRefused) as again:
        batches.batch_cancel(user=operator, pk=job.pk)
    assert again.value.status == 409


@pytest.mark.slow  # threads racing on real transactions
@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")),
    reason="row locks are PostgreSQL's (SQLite takes one lock for the whole file)",
)
@pytest.mark.django_db(transaction=True)
def test_a_cancel_racing_a_running_chunk_waits_for_it_instead_of_deadlocking(
    shop: Project, operator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunk has audited its first item (it holds the chain's head) when the cancel
    comes: both must take the job's row before the head, or PostgreSQL kills one."""
    failed_undos(shop, 20)
    job = create(operator, "leave")
    acted, cancelling = threading.Event(), threading.Event()
    real = operator_actions.step_act

    def slow_first_item(**kw: Any) -> Any:
        done = real(**kw)
        if not acted.is_set():
            acted.set()
            cancelling.wait(timeout=10)
            time.sleep(0.5)  # the cancel reaches its locks meanwhile
        return done

    monkeypatch.setattr(operator_actions, "step_act", slow_first_item)
    start, results, errors = Start(2), {}, []

    def worker() -> None:
        try:
            start.wait(0)
            results["run"] = batches.batch_run(job.pk, chunk=4)
        except BaseException as err:
            errors.append(err)
        finally:
            connection.close()

    def canceller() -> None:
        try:
            start.wait(1)
            acted.wait(timeout=10)
            cancelling.set()
            results["cancel"] = batches.batch_cancel(user=operator, pk=job.pk).state
        except BaseException as err:
            errors.append(err)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker), threading.Thread(target=canceller)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert results == {"run": "cancelled", "cancel": "cancelling"}
    job.refresh_from_db()
    # The cancel lands after the chunk it waited for, or the next (whichever takes the
    # job's row first once the first commits): never inside a chunk, never after the last.
    assert job.state == "cancelled" and job.done in (4, 8, 12)
    assert job.items.filter(outcome="").count() == 20 - job.done


def test_a_queued_job_cancelled_never_runs(shop: Project, operator: Any) -> None:
    failed_undos(shop, 3)
    job = create(operator, "leave")
    assert batches.batch_cancel(user=operator, pk=job.pk).state == "cancelled"
    assert batches.batch_run(job.pk) == "cancelled"
    assert not Step.objects.filter(left_at__isnull=False).exists()


def test_a_job_resumes_after_its_worker_died_and_each_item_is_done_once(
    shop: Project, operator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed_undos(shop, 9)
    job = create(operator, "leave")
    calls: list[int] = []
    real = operator_actions.step_act

    def dies_on_the_sixth(**kw: Any) -> Any:
        calls.append(kw["step_pk"])
        if len(calls) == 6:
            raise SystemExit("worker killed")  # mid-item: its transaction never commits
        return real(**kw)

    monkeypatch.setattr(operator_actions, "step_act", dies_on_the_sixth)
    with pytest.raises(SystemExit):
        batches.batch_run(job.pk, chunk=4)
    job.refresh_from_db()
    # The first chunk stands; the second died whole: its fifth item's action with it.
    assert job.state == "running" and job.items.exclude(outcome="").count() == 4
    assert (job.done, Step.objects.filter(left_at__isnull=False).count()) == (4, 4)
    # Another live worker's lease keeps others out; a dead one's is taken over.
    assert batches.batch_run(job.pk) == "busy"
    BatchJob.objects.filter(pk=job.pk).update(lease_owner="elsewhere:1:x:batch")
    assert job.pk not in batches.batch_orphans()  # another host's: only its expiry frees it
    BatchJob.objects.filter(pk=job.pk).update(lease_expires_at="2000-01-01T00:00:00Z")
    assert job.pk in batches.batch_orphans()
    assert batches.batch_run(job.pk) == "finished"
    assert len(calls) == 6 + 5  # 4 done, 2 rolled back with the kill, then the last 5
    assert len(set(calls)) == 9
    job.refresh_from_db()
    assert job.counts == {"succeeded": 9}
    assert AuditEntry.objects.filter(action="step.leave").count() == 9


def test_each_item_is_rechecked_and_a_refusal_is_that_items_outcome(
    shop: Project, operator: Any
) -> None:
    steps = failed_undos(shop, 4)
    job = create(operator, "retry")
    # Between confirm and run, a colleague retries one of the steps.
    operator_actions.step_act(step_pk=steps[1].pk, user=operator, action="retry", reason="")
    assert batches.batch_run(job.pk) == "finishing"  # the agent has three retries to run
    outcomes = dict(job.items.values_list("target_pk", "outcome"))
    assert outcomes[steps[1].pk] == "refused"
    assert "already requested" in job.items.get(target_pk=steps[1].pk).message
    assert [outcomes[s.pk] for s in (steps[0], steps[2], steps[3])] == ["requested"] * 3


def test_a_user_who_lost_the_role_gets_every_remaining_item_refused(
    shop: Project, operator: Any
) -> None:
    failed_undos(shop, 3)
    job = create(operator, "leave")
    operator.groups.clear()
    assert batches.batch_run(job.pk) == "finished"
    job.refresh_from_db()
    assert job.counts == {"refused": 3}
    assert set(job.items.values_list("message", flat=True)) == {"leave needs the operator role"}
    assert not Step.objects.filter(left_at__isnull=False).exists()


def test_approvals_are_decided_through_the_approval_service(shop: Project) -> None:
    a1, a2 = waiting(shop, "s-1"), waiting(shop, "s-2")
    approver = person("ap-1", "approver", shop)
    job = batches.batch_create(user=approver, action="reject", query=q("project=shop"),
                               reason="not today", expected=2)  # fmt: skip
    assert batches.batch_run(job.pk) == "finished"
    assert set(Approval.objects.filter(pk__in=[a1.pk, a2.pk]).values_list("status", flat=True)) == {
        "REJECTED"
    }
    job.refresh_from_db()
    assert job.counts == {"succeeded": 2}
    assert BatchItem.objects.filter(job=job, message__startswith="rejected").count() == 2


def test_jobs_are_visible_only_to_people_who_see_all_their_projects(
    shop: Project, operator: Any
) -> None:
    failed_undos(shop, 1)
    job = create(operator, "leave")
    stranger = person("st-1", "admin", Project.objects.create(slug="other", name="Other"))
    assert list(batches.jobs_visible(operator)) == [job]
    assert not batches.jobs_visible(stranger).exists()
    with pytest.raises(DecisionRefused) as refused:
        batches.batch_cancel(user=stranger, pk=job.pk)
    assert refused.value.status == 404


def test_a_job_whose_author_was_deleted_refuses_every_item(shop: Project, operator: Any) -> None:
    failed_undos(shop, 2)
    job = create(operator, "leave")
    operator.delete()
    assert batches.batch_run(job.pk) == "finished"
    job.refresh_from_db()
    assert job.counts == {"refused": 2} and job.actor == "user:op-1"

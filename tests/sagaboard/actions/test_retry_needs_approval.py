"""A retry of an undo that needs approval: it waits for the approver, then runs (or not).

An operator's retry of a failed undo that needs approval (the step, a shell command or a
policy; ``approvals.approval_reason``) with no APPROVED approval standing for what would
run records no failed attempt: the worker opens the approval and the saga waits for the
approver. Approving carries the retry out (as the operator who asked for it) and the
rollback goes on; rejecting leaves the step failed for an operator's resolve or leave;
a resolve or leave meanwhile voids the approval. Batch items follow it to the end.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from celery import current_app
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.http import QueryDict
from django.test import Client

from sagaboard.actions.services import batch_outcomes, operator_actions, runner
from sagaboard.actions.services.work_queues import approvals_pending, compensation_plan
from sagaboard.approvals.services import approvals
from sagaboard.approvals.services.approvals import DecisionRefused, approval_decide
from sagaboard.batches.services import batches
from sagaboard.demo.flows import DEMO_PEOPLE, TWO_APPROVERS, storebot_server_saga
from sagaboard.infra import jobs
from sagaboard.live import fragments
from sagaboard.models import Approval, ApprovalPolicy, AuditEntry, Project, Saga, Step
from sagaboard.worker import tasks
from tests.support.hitl import person

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]

WHY = f"policy {TWO_APPROVERS!r} (v1) matched"


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


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def people(shop: Project) -> dict[str, Any]:
    return {
        "olga": person("olga", "operator", shop),
        "anna": person("anna", "approver", shop),
        "amir": person("amir", "approver", shop),
    }


def stuck_refund(shop: Project, saga_id: str = "big-refund") -> Step:
    """A refund of 129 EUR whose undo failed once (the next attempt succeeds); the policy
    "refunds over 1,000: two approvers" was switched on after it failed, so its retry needs
    two approvers and none stands."""
    saga = storebot_server_saga(
        shop, saga_id, refund_needs_approval=False, refund_fails_first=1, amount=12900
    )
    assert runner.rollback_continue(saga.pk) == "ROLLBACK_FAILED"
    ApprovalPolicy.objects.update_or_create(
        project=shop, name=TWO_APPROVERS,
        defaults={"tool_glob": "refund_payment", "condition": "input.amount > 1000",
                  "approvers_required": 2, "enabled": True},
    )  # fmt: skip
    return Step.objects.get(saga=saga, tool_name="refund_payment")


def retry_waits(step: Step, olga: Any, queued: list[Any]) -> Approval:
    """Olga's retry, carried out by the worker: it waits for its approval (returned)."""
    operator_actions.step_act(step_pk=step.pk, user=olga, action="retry", reason="Stripe is up")
    assert work(queued, jobs.STEP_ACTION_RUN) == ["waiting for approval"]
    return Approval.objects.get(step=step, status=Approval.Status.PENDING)


def plan_line(step: Step) -> str:
    lines = {line["step"].pk: str(line["what"]) for line in compensation_plan(step.saga)}
    return lines[step.pk]


def test_a_retry_that_needs_approval_records_no_attempt_and_waits_for_the_approver(
    shop: Project, people: dict[str, Any], queued: list[Any]
) -> None:
    refund = stuck_refund(shop)
    approval = retry_waits(refund, people["olga"], queued)
    refund.refresh_from_db()
    assert refund.state == "ROLLBACK_FAILED" and refund.attempts.count() == 1
    assert "refused" not in (refund.error or "")
    assert approval.why == WHY and approval.required == 2
    saga = Saga.objects.get(pk=refund.saga_id)
    assert saga.waiting_for == "APPROVAL"
    assert plan_line(refund) == (
        f"rollback failed: a retry waits for approval ({WHY}); once approved, it runs"
    )
    waits = AuditEntry.objects.get(action="step.retry_waits")
    assert waits.actor == "worker" and f"approval #{approval.pk}" in waits.reason
    assert waits.data["requested_by"] == "user:olga"
    # A second retry is refused while the first waits: it says for which approval.
    with pytest.raises(DecisionRefused, match=f"waits for approval #{approval.pk}"):
        operator_actions.step_act(step_pk=refund.pk, user=people["olga"], action="retry",
                                  reason="")  # fmt: skip


def test_approving_the_retry_runs_the_undo_as_the_operators_retry_and_the_rollback_ends(
    shop: Project, people: dict[str, Any], queued: list[Any]
) -> None:
    refund = stuck_refund(shop)
    approval = retry_waits(refund, people["olga"], queued)
    first = approval_decide(approval_id=approval.pk, user=people["anna"], decision="approve",
                            reason="Stripe is back")  # fmt: skip
    assert not first.decided and work(queued, jobs.STEP_ACTION_RUN) == []
    approval_decide(approval_id=approval.pk, user=people["amir"], decision="approve",
                    reason="Stripe is back")  # fmt: skip
    assert work(queued, jobs.STEP_ACTION_RUN) == ["ROLLED_BACK"]
    refund.refresh_from_db()
    assert refund.state == "ROLLED_BACK" and refund.pending_action is None
    second = refund.attempts.order_by("number").last()
    assert second is not None and second.number == 2 and second.actor == "user:olga"
    saga = Saga.objects.get(pk=refund.saga_id)
    states = dict(saga.steps.values_list("tool_name", "state"))
    assert states["return_item"] == "ROLLED_BACK"  # the rest of the halted rollback went on
    assert saga.status == "ROLLED_BACK" and saga.waiting_for is None


def test_the_demos_stuck_refund_retry_waits_for_anna_and_amir_then_runs_again(
    settings: Any, queued: list[Any]
) -> None:
    settings.DEBUG = True
    call_command("sagaboard_demo", stdout=StringIO())
    users = get_user_model().objects
    olga, anna, amir = (users.get(username=n) for n in ("olga", "anna", "amir"))
    assert {"anna", "amir"} <= {p.username for p in DEMO_PEOPLE}
    queued.clear()
    saga = Saga.objects.get(saga_id="demo-refund-stuck")
    refund = Step.objects.get(saga=saga, tool_name="refund_payment")
    approval = retry_waits(refund, olga, queued)
    assert refund.attempts.count() == 1
    for who in (anna, amir):
        approval_decide(approval_id=approval.pk, user=who, decision="approve", reason="try again")
    # Carried out: Stripe is still down in the demo, so the undo ran and failed again.
    assert work(queued, jobs.STEP_ACTION_RUN) == ["ROLLBACK_FAILED"]
    refund.refresh_from_db()
    assert refund.attempts.count() == 2 and refund.pending_action is None
    assert "Stripe API timed out" in (refund.error or "")
    saga.refresh_from_db()
    assert saga.waiting_for == "OPERATOR"


def test_a_rejected_retry_leaves_the_step_failed_for_resolve_or_leave_with_no_new_attempt(
    shop: Project, people: dict[str, Any], queued: list[Any]
) -> None:
    refund = stuck_refund(shop)
    approval = retry_waits(refund, people["olga"], queued)
    approval_decide(approval_id=approval.pk, user=people["anna"], decision="reject",
                    reason="refund it by hand")  # fmt: skip
    assert work(queued, jobs.STEP_ACTION_RUN) == ["rejected"]
    refund.refresh_from_db()
    assert refund.state == "ROLLBACK_FAILED" and refund.attempts.count() == 1
    assert refund.pending_action is None and refund.needs_operator
    saga = Saga.objects.get(pk=refund.saga_id)
    assert saga.status == "ROLLBACK_FAILED" and saga.waiting_for == "OPERATOR"
    assert plan_line(refund) == (
        "rollback failed: the approver rejected its retry (refund it by hand); "
        "waits for an operator (resolve or leave)"
    )
    assert AuditEntry.objects.filter(action="step.retry_rejected").exists()
    with pytest.raises(DecisionRefused, match="rejected"):
        operator_actions.step_act(step_pk=refund.pk, user=people["olga"], action="retry",
                                  reason="")  # fmt: skip


def test_force_resolving_a_step_whose_retry_waits_voids_the_approval_and_ends_the_rollback(
    shop: Project, people: dict[str, Any], queued: list[Any]
) -> None:
    refund = stuck_refund(shop)
    approval = retry_waits(refund, people["olga"], queued)
    refund.refresh_from_db()
    assert refund.needs_operator  # resolve and leave are offered while the retry waits
    operator_actions.step_act(step_pk=refund.pk, user=people["olga"], action="resolve",
                              reason="reversed in Stripe")  # fmt: skip
    approval.refresh_from_db()
    assert approval.status == "VOID" and approval.decided_reason == "the step was resolved by hand"
    voided = [e for e in AuditEntry.objects.filter(action="approval.void")
              if e.data.get("approval") == approval.pk]  # fmt: skip
    assert [e.actor for e in voided] == ["user:olga"]
    assert approvals_pending([shop]) == []
    work(queued, jobs.STEP_ACTION_RUN)
    saga = Saga.objects.get(pk=refund.saga_id)
    assert saga.status == "ROLLED_BACK" and not approvals_pending([shop])
    assert not Approval.objects.filter(saga=saga, status="PENDING").exists()


def test_leaving_a_step_whose_retry_waits_voids_the_approval(
    shop: Project, people: dict[str, Any], queued: list[Any]
) -> None:
    refund = stuck_refund(shop)
    approval = retry_waits(refund, people["olga"], queued)
    operator_actions.step_act(step_pk=refund.pk, user=people["olga"], action="leave",
                              reason="customer keeps the refund")  # fmt: skip
    approval.refresh_from_db()
    assert approval.status == "VOID" and approval.decided_reason == "the step was left failed"
    refund.refresh_from_db()
    assert refund.pending_action is None and refund.left_at is not None
    saga = Saga.objects.get(pk=refund.saga_id)
    assert saga.waiting_for is None and approvals_pending([shop]) == []


def test_a_pending_approval_left_on_a_step_that_settled_is_voided_by_the_worker(
    shop: Project, people: dict[str, Any], queued: list[Any]
) -> None:
    """However it came to be (a worker's refused undo opened one), none outlives its step."""
    refund = stuck_refund(shop)
    from sagaboard.approvals.services.approvals import approval_open

    stale = approval_open(refund.saga, refund, WHY)
    operator_actions.step_act(step_pk=refund.pk, user=people["olga"], action="resolve",
                              reason="reversed in Stripe")  # fmt: skip
    work(queued, jobs.STEP_ACTION_RUN)
    stale.refresh_from_db()
    assert stale.status == "VOID" and stale.decided_reason == "the step was resolved by hand"


def test_the_retry_answer_says_it_waits_for_approval_as_info(
    shop: Project, people: dict[str, Any], queued: list[Any]
) -> None:
    refund = stuck_refund(shop)
    client = Client()
    client.force_login(people["olga"])
    answer = client.post(f"/steps/{refund.pk}/action/", {"action": "retry", "reason": ""},
                         headers={"HX-Request": "true"})  # fmt: skip
    page = answer.content.decode()
    said = f"Retry waits for approval: refund_payment ({refund.step_id}) in storebot-return: {WHY}."
    assert said.replace("'", "&#x27;") in page
    assert 'class="message info"' in page and "data-follow" not in page
    work(queued, jobs.STEP_ACTION_RUN)  # the worker opens the approval
    assert Approval.objects.filter(step=refund, status="PENDING").count() == 1
    refund.refresh_from_db()
    assert refund.attempts.count() == 1


def _batch_retry(user: Any, queued: list[Any]) -> Any:
    job = batches.batch_create(user=user, action="retry", query=QueryDict("project=shop"),
                               reason="Stripe is back", expected=1)  # fmt: skip
    work(queued, jobs.BATCH_RUN)
    work(queued, jobs.STEP_ACTION_RUN)
    job.refresh_from_db()
    return job


def test_a_batch_retry_item_runs_while_its_approval_waits_then_is_undone(
    shop: Project, people: dict[str, Any], queued: list[Any]
) -> None:
    refund = stuck_refund(shop)
    job = batch_outcomes.job_current(_batch_retry(people["olga"], queued))
    item = job.items.get()
    assert item.outcome == "requested" and "waits for approval" in item.message
    assert job.state == "finishing"
    approval = Approval.objects.get(step=refund, status="PENDING")
    for who in ("anna", "amir"):
        approval_decide(approval_id=approval.pk, user=people[who], decision="approve",
                        reason="Stripe is back")  # fmt: skip
    work(queued, jobs.STEP_ACTION_RUN)
    item.refresh_from_db()
    assert (item.outcome, item.message) == ("succeeded", "the undo ran again: ROLLED_BACK")


def test_a_batch_retry_item_the_approver_rejected_is_skipped(
    shop: Project, people: dict[str, Any], queued: list[Any]
) -> None:
    refund = stuck_refund(shop)
    job = _batch_retry(people["olga"], queued)
    approval = Approval.objects.get(step=refund, status="PENDING")
    approval_decide(approval_id=approval.pk, user=people["anna"], decision="reject",
                    reason="not while Stripe is flaky")  # fmt: skip
    work(queued, jobs.STEP_ACTION_RUN)
    item = batch_outcomes.job_current(job).items.get()
    assert item.outcome == "refused"
    assert item.message == "skipped: the approver rejected the retry (no undo ran)"


@pytest.mark.parametrize(
    ("action", "state", "void_reason"),
    [
        ("resolve", "RESOLVED", "the step was resolved by hand"),
        ("leave", "ROLLBACK_FAILED", "the step was left failed"),
    ],
)
def test_a_batch_resolve_or_leave_takes_in_a_step_whose_retry_waits_and_voids_its_approval(
    shop: Project,
    people: dict[str, Any],
    queued: list[Any],
    action: str,
    state: str,
    void_reason: str,
) -> None:
    plain = stuck_refund(shop, "other-refund")  # failed, no retry asked for
    ApprovalPolicy.objects.update(enabled=False)  # both failed before the policy was on
    waits = stuck_refund(shop)
    approval = retry_waits(waits, people["olga"], queued)
    preview = batches.batch_preview(user=people["olga"], action=action,
                                    query=QueryDict("project=shop"))  # fmt: skip
    assert preview.count == 2
    job = batches.batch_create(user=people["olga"], action=action, query=QueryDict("project=shop"),
                               reason="refunded in Stripe by hand", expected=2)  # fmt: skip
    work(queued, jobs.BATCH_RUN)
    work(queued, jobs.STEP_ACTION_RUN)
    job.refresh_from_db()
    job = batch_outcomes.job_current(job)
    outcomes = {item.target_pk: item.outcome for item in job.items.all()}
    assert outcomes == {waits.pk: "succeeded", plain.pk: "succeeded"}
    assert job.state == "finished"
    approval.refresh_from_db()
    assert approval.status == "VOID" and approval.decided_reason == void_reason
    waits.refresh_from_db()
    assert waits.state == state and waits.pending_action is None
    assert approvals_pending([shop]) == []
    assert Saga.objects.get(pk=waits.saga_id).waiting_for != "APPROVAL"


@pytest.mark.parametrize(
    ("action", "skipped"),
    [
        ("resolve", "skipped: the step was resolved by hand instead of retried"),
        ("leave", "skipped: the step was left failed instead (retry not run)"),
    ],
)
def test_a_batch_resolve_or_leave_over_a_batch_retry_that_waits_ends_both_jobs(
    shop: Project, people: dict[str, Any], queued: list[Any], action: str, skipped: str
) -> None:
    refund = stuck_refund(shop)
    retry_job = _batch_retry(people["olga"], queued)
    assert batch_outcomes.job_current(retry_job).state == "finishing"
    job = batches.batch_create(user=people["olga"], action=action, query=QueryDict("project=shop"),
                               reason="refunded in Stripe by hand", expected=1)  # fmt: skip
    work(queued, jobs.BATCH_RUN)
    work(queued, jobs.STEP_ACTION_RUN)
    for ended in (job, retry_job):
        ended.refresh_from_db()
        assert batch_outcomes.job_current(ended).state == "finished"
    assert job.items.get().outcome == "succeeded"
    assert (retry_job.items.get().outcome, retry_job.items.get().message) == ("refused", skipped)
    assert not Approval.objects.filter(step=refund, status="PENDING").exists()


def _step_html(page: str, step: Step) -> str:
    """The timeline item (saga page) or needs-attention item of ``step``."""
    for anchor in (f'id="step-{step.step_id}"', f'id="failure-{step.pk}"'):
        if anchor in page:
            start = page.index(anchor)
            return page[start : page.index("</li>", page.index("<form", start))]
    raise AssertionError(f"{step} is not on the page")


def test_after_the_approver_rejects_its_retry_the_pages_offer_resolve_or_leave_not_a_retry(
    shop: Project, people: dict[str, Any], queued: list[Any]
) -> None:
    """The rule the retry's answer goes by (a further retry of what the approver rejected is
    refused), shown where the buttons are: Retry is not offered, and why in the same words."""
    refund = stuck_refund(shop)
    approval = retry_waits(refund, people["olga"], queued)
    approval_decide(approval_id=approval.pk, user=people["anna"], decision="reject",
                    reason="refund it by hand")  # fmt: skip
    assert work(queued, jobs.STEP_ACTION_RUN) == ["rejected"]
    why = (
        f"an approver rejected this undo (approval #{approval.pk}: refund it by hand): "
        "force-resolve it or leave it failed"
    )
    client = Client()
    client.force_login(people["olga"])
    saga_page = client.get(f"/sagas/shop/{refund.saga.saga_id}/").content.decode()
    item = _step_html(saga_page, refund)
    assert "ROLLBACK_FAILED" in item and "REJECTED" in item and "refund it by hand" in item
    attention = _step_html(client.get("/attention/").content.decode(), refund)
    live = _step_html(fragments.saga_detail(refund.saga_id, 7), refund)
    for shown in (item, attention, live):
        assert 'value="retry"' not in shown, shown
        assert f"Retry is not offered: {why}" in shown
        assert 'value="resolve"' in shown and 'value="leave"' in shown
    answer = client.post(f"/steps/{refund.pk}/action/", {"action": "retry", "reason": ""},
                         headers={"HX-Request": "true"})  # fmt: skip
    assert answer.status_code == 409 and why in answer.content.decode()


def test_the_sweep_voids_approvals_left_pending_on_settled_steps_in_every_project(
    shop: Project, queued: list[Any]
) -> None:
    """A step that settled with no worker task ending after it (a worker killed between its
    undo's commit and its task's end) leaves no approval in the queue beyond the next sweep."""
    books = Project.objects.create(slug="books", name="Books")
    stale = []
    for project in (shop, books):
        step = stuck_refund(project)
        stale.append(approvals.approval_open(step.saga, step, WHY))
        with runner.attached(step.saga) as engine:  # the engine's resolve, and nothing after
            engine.resolve(step.step_id, "reversed in Stripe", actor="user:olga")
    assert len(approvals_pending([shop, books])) == 2
    swept = tasks.sweep()
    assert approvals_pending([shop, books]) == []
    assert swept["approvals_voided"] == 2
    voided = Approval.objects.filter(pk__in=[a.pk for a in stale], status="VOID")
    assert set(voided.values_list("decided_reason", flat=True)) == {"the step was resolved by hand"}
    assert voided.count() == 2
    assert tasks.sweep()["approvals_voided"] == 0

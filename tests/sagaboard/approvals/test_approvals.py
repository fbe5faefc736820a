"""Approvals: which undos wait for a person, and each decision taken once, by the right people."""

from __future__ import annotations

from typing import Any

import pytest

from sagaboard.actions.services import runner
from sagaboard.approvals.services import approvals
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.models import (
    ApiToken,
    Approval,
    ApprovalPolicy,
    AuditEntry,
    Event,
    Project,
    Saga,
    Step,
)
from tests.support.hitl import person, states, storebot_server_saga

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def pending(saga: Saga) -> Approval:
    return Approval.objects.get(saga=saga, status=Approval.Status.PENDING)


def test_a_worker_pauses_before_an_undo_that_needs_approval(shop: Project) -> None:
    saga = storebot_server_saga(shop)
    assert runner.rollback_continue(saga.pk) == "COMPENSATING"
    assert states(saga) == {
        "return_item": "COMPLETED",  # not undone before the newer step: LIFO holds
        "refund_payment": "AWAITING_APPROVAL",
        "generate_label": "FAILED",
    }
    approval = pending(saga)
    assert approval.plan["kind"] == "handler"
    assert approval.plan["handler"] == "storebot.refund_payment"
    assert approval.plan["input"] == {"chargeId": "ch_882", "amount": 120, "currency": "EUR"}
    # Asking again (a second worker run) does not queue a second approval.
    runner.rollback_continue(saga.pk)
    assert Approval.objects.filter(saga=saga).count() == 1


def test_an_approved_undo_runs_then_the_rest_of_the_rollback(shop: Project) -> None:
    saga = storebot_server_saga(shop)
    runner.rollback_continue(saga.pk)
    ann = person("ann", "approver", shop)
    outcome = approvals.approval_decide(
        approval_id=pending(saga).pk, user=ann, decision="approve", reason="refund was wrong"
    )
    assert outcome.decided and outcome.approval.status == Approval.Status.APPROVED
    assert runner.rollback_continue(saga.pk) == "ROLLED_BACK"
    refund = Step.objects.get(saga=saga, tool_name="refund_payment")
    assert refund.state == "ROLLED_BACK" and refund.decided_by == "user:ann"
    assert [a.actor for a in refund.attempts.all()] == ["user:ann"]
    entry = AuditEntry.objects.get(action="approval.approve")
    assert (entry.actor, entry.reason) == ("user:ann", "refund was wrong")
    assert Event.objects.filter(saga=saga, kind="approval.approve", actor="user:ann").exists()
    assert Event.objects.filter(saga=saga, kind="undo.output").count() == 2


def test_a_worker_overtaken_before_its_first_write_is_busy_and_has_run_nothing(
    shop: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker takes its lease with its first write (one commit fewer): one that read
    the saga, then lost it to another worker before writing, must do nothing at all."""
    saga = storebot_server_saga(shop)
    runner.rollback_continue(saga.pk)
    ann = person("ann", "approver", shop)
    approvals.approval_decide(
        approval_id=pending(saga).pk, user=ann, decision="approve", reason="refund was wrong"
    )
    gate, overtaken = runner.ServerGate.approve_compensation, []

    def another_worker_first(self: runner.ServerGate, request: Any) -> Any:
        if not overtaken:  # e.g. the sweep's task, in while this one waits on the database
            overtaken.append("running")
            overtaken.append(runner.rollback_continue(saga.pk))
        return gate(self, request)

    monkeypatch.setattr(runner.ServerGate, "approve_compensation", another_worker_first)
    with pytest.raises(runner.Busy):
        runner.rollback_continue(saga.pk)
    assert overtaken == ["running", "ROLLED_BACK"]
    refund = Step.objects.get(saga=saga, tool_name="refund_payment")
    assert refund.state == "ROLLED_BACK" and refund.attempts.count() == 1
    assert Event.objects.filter(saga=saga, kind="undo.output", step_id=refund.step_id).count() == 1
    saga.refresh_from_db()
    assert (saga.status, saga.lease_owner) == ("ROLLED_BACK", None)


def test_a_rejected_undo_never_runs(shop: Project) -> None:
    saga = storebot_server_saga(shop)
    runner.rollback_continue(saga.pk)
    ann = person("ann", "approver", shop)
    approvals.approval_decide(
        approval_id=pending(saga).pk, user=ann, decision="reject", reason="customer keeps it"
    )
    runner.rollback_continue(saga.pk)
    assert states(saga)["refund_payment"] == "REJECTED"
    assert states(saga)["return_item"] == "ROLLED_BACK"
    assert not Event.objects.filter(saga=saga, kind="undo.output", step_id="step-2").exists()


@pytest.mark.parametrize(
    ("decision", "reason", "field"),
    [("approve", "", "reason"), ("approve", "   ", "reason"), ("maybe", "why", "decision")],
)
def test_a_decision_needs_a_reason_and_a_known_verb(
    shop: Project, decision: str, reason: str, field: str
) -> None:
    saga = storebot_server_saga(shop)
    runner.rollback_continue(saga.pk)
    ann = person("ann", "approver", shop)
    with pytest.raises(DecisionRefused) as refused:
        approvals.approval_decide(
            approval_id=pending(saga).pk, user=ann, decision=decision, reason=reason
        )
    assert refused.value.field == field
    assert pending(saga).votes.count() == 0


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_viewers_and_operators_cannot_approve(shop: Project, role: str) -> None:
    saga = storebot_server_saga(shop)
    runner.rollback_continue(saga.pk)
    user = person("val", role, shop)
    with pytest.raises(DecisionRefused) as refused:
        approvals.approval_decide(
            approval_id=pending(saga).pk, user=user, decision="approve", reason="ok"
        )
    assert refused.value.code == "forbidden"
    assert pending(saga).votes.count() == 0


def test_an_approver_of_another_project_finds_nothing(shop: Project) -> None:
    saga = storebot_server_saga(shop)
    runner.rollback_continue(saga.pk)
    other = Project.objects.create(slug="other", name="Other")
    eve = person("eve", "approver", other)
    with pytest.raises(DecisionRefused) as refused:
        approvals.approval_decide(
            approval_id=pending(saga).pk, user=eve, decision="approve", reason="ok"
        )
    assert refused.value.code == "not_found"


def test_the_person_whose_token_posted_the_saga_cannot_approve_it(shop: Project) -> None:
    bob = person("bob", "admin", shop)
    token = ApiToken.objects.create(
        project=shop, label="bob's agent", prefix="b0b0b0b0", secret_hash="0", created_by=bob
    )
    saga = storebot_server_saga(shop, token_pk=token.pk)
    runner.rollback_continue(saga.pk)
    with pytest.raises(DecisionRefused, match="someone else must decide"):
        approvals.approval_decide(
            approval_id=pending(saga).pk, user=bob, decision="approve", reason="mine"
        )
    ann = person("ann", "approver", shop)
    approvals.approval_decide(
        approval_id=pending(saga).pk, user=ann, decision="approve", reason="ok"
    )


def test_four_eyes_needs_two_different_people(shop: Project) -> None:
    ApprovalPolicy.objects.create(
        project=shop, name="big refunds", tool_glob="refund_*",
        condition="input.amount > 100", approvers_required=2,
    )  # fmt: skip
    saga = storebot_server_saga(shop, refund_needs_approval=False)
    runner.rollback_continue(saga.pk)
    approval = pending(saga)
    assert approval.required == 2 and approval.policy_snapshot["name"] == "big refunds"
    assert "big refunds" in approval.why
    ann, cat = person("ann", "approver", shop), person("cat", "approver", shop)
    first = approvals.approval_decide(
        approval_id=approval.pk, user=ann, decision="approve", reason="checked"
    )
    assert not first.decided
    with pytest.raises(DecisionRefused, match="second, different person"):
        approvals.approval_decide(
            approval_id=approval.pk, user=ann, decision="approve", reason="again"
        )
    second = approvals.approval_decide(
        approval_id=approval.pk, user=cat, decision="approve", reason="agreed"
    )
    assert second.decided and second.approval.status == Approval.Status.APPROVED
    with pytest.raises(DecisionRefused, match="already decided: approved by ann, cat"):
        approvals.approval_decide(
            approval_id=approval.pk, user=person("dan", "approver", shop),
            decision="reject", reason="late",
        )  # fmt: skip


def test_a_policy_condition_that_does_not_match_lets_the_undo_run(shop: Project) -> None:
    ApprovalPolicy.objects.create(
        project=shop, name="big refunds", tool_glob="refund_*", condition="input.amount > 500"
    )
    saga = storebot_server_saga(shop, refund_needs_approval=False)
    assert runner.rollback_continue(saga.pk) == "ROLLED_BACK"
    assert not Approval.objects.exists()


def test_a_policy_edit_applies_only_to_approvals_created_after_it(shop: Project) -> None:
    policy = ApprovalPolicy.objects.create(project=shop, name="refunds", tool_glob="refund_*")
    first = storebot_server_saga(shop, "s-1", refund_needs_approval=False)
    runner.rollback_continue(first.pk)
    policy.approvers_required, policy.version = 2, 2
    policy.save()
    second = storebot_server_saga(shop, "s-2", refund_needs_approval=False)
    runner.rollback_continue(second.pk)
    assert (pending(first).required, pending(first).policy_snapshot["version"]) == (1, 1)
    assert (pending(second).required, pending(second).policy_snapshot["version"]) == (2, 2)


@pytest.mark.record_rewritten("step.undo")  # the undo plan is changed in the table
def test_a_changed_plan_voids_the_approval_and_asks_again(shop: Project) -> None:
    saga = storebot_server_saga(shop)
    runner.rollback_continue(saga.pk)
    first = pending(saga)
    Step.objects.filter(pk=first.step_id).update(
        undo={"kind": "handler", "handler": "storebot.refund_payment", "args": {"fail_first": 9}}
    )
    ann = person("ann", "approver", shop)
    with pytest.raises(DecisionRefused) as refused:
        approvals.approval_decide(approval_id=first.pk, user=ann, decision="approve", reason="ok")
    assert refused.value.code == "void"
    first.refresh_from_db()
    assert first.status == Approval.Status.VOID
    runner.rollback_continue(saga.pk)
    fresh = pending(saga)
    assert fresh.pk != first.pk and fresh.plan["args"] == {"fail_first": 9}


def test_shell_command_undos_always_need_approval(shop: Project) -> None:
    step = Step(tool_name="rm_file", undo={"kind": "command", "command": "true"})
    assert approvals.approval_reason(shop, step) == "a shell-command undo always needs approval"


def test_expiry_escalates_and_keeps_waiting_by_default(shop: Project, settings: Any) -> None:
    ApprovalPolicy.objects.create(
        project=shop, name="refunds", tool_glob="refund_*", timeout_seconds=60
    )
    saga = storebot_server_saga(shop, refund_needs_approval=False)
    runner.rollback_continue(saga.pk)
    approval = pending(saga)
    assert approvals.approvals_expire(now=approval.created_at) == 0
    later = approval.expires_at
    assert later is not None
    assert approvals.approvals_expire(now=later) == 1
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING and approval.escalated_at == later
    assert AuditEntry.objects.filter(action="approval.escalated").count() == 1
    assert approvals.approvals_expire(now=later) == 0  # escalated once


def test_expiry_rejects_when_the_policy_says_so(shop: Project) -> None:
    ApprovalPolicy.objects.create(
        project=shop, name="refunds", tool_glob="refund_*", timeout_seconds=60,
        on_expiry=ApprovalPolicy.OnExpiry.REJECT,
    )  # fmt: skip
    saga = storebot_server_saga(shop, refund_needs_approval=False)
    runner.rollback_continue(saga.pk)
    approval = pending(saga)
    assert approval.expires_at is not None
    approvals.approvals_expire(now=approval.expires_at)
    approval.refresh_from_db()
    assert approval.status == Approval.Status.EXPIRED
    assert "rejected automatically" in approval.decided_reason
    runner.rollback_continue(saga.pk)
    assert states(saga)["refund_payment"] == "REJECTED"

"""Retry, force-resolve or leave a failed undo: once, by operators, and the rollback goes on."""

from __future__ import annotations

import pytest

from sagaboard.actions.services import operator_actions, runner
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.models import AuditEntry, Event, Project, Saga, Step
from tests.support.hitl import person, states, storebot_server_saga

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def stuck(shop: Project, fails: int = 1) -> tuple[Saga, Step]:
    """refund undone unattended, return_item's undo failed: the saga halted ROLLBACK_FAILED."""
    saga = storebot_server_saga(shop, refund_needs_approval=False, return_fails_first=fails)
    assert runner.rollback_continue(saga.pk) == "ROLLBACK_FAILED"
    step = Step.objects.get(saga=saga, tool_name="return_item")
    assert step.state == "ROLLBACK_FAILED" and "upstream timed out" in (step.error or "")
    return saga, step


def test_a_retry_reruns_the_undo_and_the_saga_ends_rolled_back(shop: Project) -> None:
    saga, step = stuck(shop)
    olga = person("olga", "operator", shop)
    operator_actions.step_act(step_pk=step.pk, user=olga, action="retry", reason="")
    assert runner.step_action_run(step.pk) == "ROLLED_BACK"
    saga.refresh_from_db()
    step.refresh_from_db()
    assert saga.status == "ROLLED_BACK" and step.pending_action is None
    assert [(a.number, a.outcome, a.actor) for a in step.attempts.all()] == [
        (1, "failed", None),
        (2, "succeeded", "user:olga"),
    ]
    assert AuditEntry.objects.get(action="step.retry").actor == "user:olga"


def test_a_double_clicked_retry_is_asked_once(shop: Project) -> None:
    _, step = stuck(shop)
    olga = person("olga", "operator", shop)
    operator_actions.step_act(step_pk=step.pk, user=olga, action="retry", reason="")
    with pytest.raises(DecisionRefused, match="already requested: retry by user:olga"):
        operator_actions.step_act(step_pk=step.pk, user=olga, action="retry", reason="")
    runner.step_action_run(step.pk)
    assert runner.step_action_run(step.pk) == "nothing pending"  # a redelivered task
    assert step.attempts.count() == 2


def test_resolving_needs_a_reason_and_lets_the_rollback_finish(shop: Project) -> None:
    saga, step = stuck(shop, fails=99)
    olga = person("olga", "operator", shop)
    with pytest.raises(DecisionRefused) as refused:
        operator_actions.step_act(step_pk=step.pk, user=olga, action="resolve", reason=" ")
    assert refused.value.field == "reason"
    operator_actions.step_act(
        step_pk=step.pk, user=olga, action="resolve", reason="cancelled the RMA by hand"
    )
    assert runner.step_action_run(step.pk) == "RESOLVED"
    saga.refresh_from_db()
    step.refresh_from_db()
    assert saga.status == "ROLLED_BACK"
    assert (step.decided_by, step.decision_note) == ("user:olga", "cancelled the RMA by hand")


def test_leaving_a_failure_is_recorded_and_takes_it_off_the_list(shop: Project) -> None:
    saga, step = stuck(shop, fails=99)
    olga = person("olga", "operator", shop)
    operator_actions.step_act(step_pk=step.pk, user=olga, action="leave", reason="accepted loss")
    step.refresh_from_db()
    assert (step.left_by, step.left_reason) == ("user:olga", "accepted loss")
    assert step.state == "ROLLBACK_FAILED"
    assert Event.objects.filter(saga=saga, kind="step.leave", detail="accepted loss").exists()
    with pytest.raises(DecisionRefused, match="already left failed"):
        operator_actions.step_act(step_pk=step.pk, user=olga, action="retry", reason="")


@pytest.mark.record_rewritten("step.undo")  # the undo plan is changed in the table
def test_a_halted_rollback_continues_after_the_retry_with_the_older_steps(
    shop: Project,
) -> None:
    """generate_label fails; refund's undo fails (halt): return_item waits behind it."""
    saga = storebot_server_saga(shop, refund_needs_approval=False)
    Step.objects.filter(saga=saga, tool_name="refund_payment").update(
        undo={"kind": "handler", "handler": "storebot.refund_payment", "args": {"fail_first": 1}}
    )
    runner.rollback_continue(saga.pk)
    assert states(saga)["refund_payment"] == "ROLLBACK_FAILED"
    assert states(saga)["return_item"] == "COMPLETED"  # halted: not undone out of order
    refund = Step.objects.get(saga=saga, tool_name="refund_payment")
    operator_actions.step_act(step_pk=refund.pk, user=person("olga", "operator", shop),
                        action="retry", reason="")  # fmt: skip
    runner.step_action_run(refund.pk)
    assert states(saga) == {
        "return_item": "ROLLED_BACK",
        "refund_payment": "ROLLED_BACK",
        "generate_label": "FAILED",
    }


@pytest.mark.parametrize("role", ["viewer", "approver"])
def test_only_operators_retry_or_resolve(shop: Project, role: str) -> None:
    _, step = stuck(shop)
    user = person("vic", role, shop)
    for action in ("retry", "resolve", "leave"):
        with pytest.raises(DecisionRefused) as refused:
            operator_actions.step_act(step_pk=step.pk, user=user, action=action, reason="r")
        assert refused.value.code == "forbidden"
    step.refresh_from_db()
    assert step.pending_action is None and step.left_at is None


def test_a_step_that_is_not_failed_cannot_be_retried(shop: Project) -> None:
    saga, _ = stuck(shop)
    done = Step.objects.get(saga=saga, tool_name="refund_payment")
    with pytest.raises(DecisionRefused, match="already settled: the step is ROLLED_BACK"):
        operator_actions.step_act(step_pk=done.pk, user=person("olga", "operator", shop),
                            action="retry", reason="")  # fmt: skip


def test_an_operator_of_another_project_finds_nothing(shop: Project) -> None:
    _, step = stuck(shop)
    other = Project.objects.create(slug="other", name="Other")
    with pytest.raises(DecisionRefused) as refused:
        operator_actions.step_act(step_pk=step.pk, user=person("eve", "operator", other),
                            action="retry", reason="")  # fmt: skip
    assert refused.value.code == "not_found"

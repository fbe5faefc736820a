"""The demo data a new user sees: real engine runs, loaded once."""

from __future__ import annotations

import re
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.management import CommandError, call_command

from sagaboard.approvals.services.approvals import DecisionRefused, approval_decide
from sagaboard.demo.flows import DEMO_PEOPLE, TWO_APPROVERS
from sagaboard.models import Approval, ApprovalPolicy, Project, Saga, Step

# slow: each test loads the whole demo (about 1.3 s); make test runs them, test-fast does not.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified"), pytest.mark.slow]


def test_demo_sagas_cover_every_outcome_an_operator_meets(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = True
    call_command("sagaboard_demo")
    status = dict(Saga.objects.values_list("saga_id", "status"))
    assert status == {
        "demo-storebot-return": "ROLLED_BACK",
        "demo-checkout-ok": "COMPLETED",
        "demo-refund-stuck": "ROLLBACK_FAILED",
        "demo-refund-rejected": "ROLLED_BACK",
        "demo-checkout-running": "IN_PROGRESS",
        "demo-refund-awaiting": "COMPENSATING",
        "demo-return-failing": "ROLLBACK_FAILED",
        "demo-refund-queued-1": "COMPENSATING",
        "demo-refund-queued-2": "COMPENSATING",
        "demo-refund-two-approvers": "COMPENSATING",
    }
    waiting = Approval.objects.get(saga__saga_id="demo-refund-awaiting")
    assert waiting.status == "PENDING" and waiting.step.tool_name == "refund_payment"
    failing = Step.objects.get(saga__saga_id="demo-return-failing", tool_name="return_item")
    assert failing.state == "ROLLBACK_FAILED" and failing.attempts.count() == 1
    stuck = dict(
        Step.objects.filter(saga__saga_id="demo-refund-stuck").values_list("step_id", "state")
    )
    assert stuck == {"step-1": "COMPLETED", "step-2": "ROLLBACK_FAILED", "step-3": "FAILED"}
    rejected = Step.objects.get(saga__saga_id="demo-refund-rejected", step_id="step-2")
    assert rejected.state == "REJECTED" and rejected.decided_by == "demo-approver"


def test_loading_twice_adds_nothing(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = True
    call_command("sagaboard_demo", stdout=StringIO())
    counts = everything()
    call_command("sagaboard_demo", stdout=StringIO())
    assert everything() == counts


def everything() -> dict[str, int]:
    from sagaboard.models import ApiToken, ApprovalPolicy, AuditEntry, Event

    User = get_user_model()
    models = (Saga, Step, Event, Approval, ApprovalPolicy, ApiToken, AuditEntry, User)
    counts = {m.__name__: m.objects.count() for m in models}
    counts["members"] = Project.objects.get(slug="demo").members.count()
    counts["roles"] = User.groups.through.objects.count()
    return counts


def test_demo_data_is_refused_in_production(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = False
    with pytest.raises(CommandError, match="DEBUG is off"):
        call_command("sagaboard_demo")
    assert Saga.objects.count() == 0


def test_the_admin_lists_demo_sagas_and_keeps_records_read_only(settings, client) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = True
    call_command("sagaboard_demo")
    assert client.login(username="demo", password="demo")
    page = client.get("/admin/sagaboard/saga/")
    assert page.status_code == 200 and b"demo-refund-stuck" in page.content
    saga = Saga.objects.get(saga_id="demo-refund-stuck")
    assert client.get(f"/admin/sagaboard/saga/{saga.pk}/change/").status_code == 200
    assert client.get("/admin/sagaboard/event/add/").status_code == 403
    assert (
        client.post(f"/admin/sagaboard/saga/{saga.pk}/delete/", {"post": "yes"}).status_code == 403
    )
    assert Saga.objects.filter(pk=saga.pk).exists()


def test_every_model_is_in_the_admin_and_records_cannot_be_edited_there() -> None:
    from django.apps import apps
    from django.contrib import admin

    for model in apps.get_app_config("sagaboard").get_models():
        assert admin.site.is_registered(model), model
    for model in (Approval, Step, Saga):
        assert not admin.site.get_model_admin(model).has_change_permission(None)  # type: ignore[arg-type]


def _agree(step: Step) -> None:
    """What a step returned is about what it was given: every key both carry is equal."""
    shared = set(step.input or {}) & set(step.output or {})
    assert {k: step.output[k] for k in shared} == {k: step.input[k] for k in shared}, step


def test_every_demo_sagas_outputs_agree_with_its_inputs(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = True
    call_command("sagaboard_demo")
    steps = list(Step.objects.select_related("saga"))
    for step in steps:
        _agree(step)
    returns = [s for s in steps if s.tool_name == "return_item"]
    assert len(returns) == 8 and all(s.output is not None for s in returns)
    for step in returns:
        assert step.output["itemId"] == step.input["itemId"], step.saga.saga_id
    # Each return saga is about one item: its refund is of that item's charge, its label
    # of that item's order, and no two sagas return the same item.
    items = []
    for saga in Saga.objects.filter(name="storebot-return"):
        by_tool = {s.tool_name: s for s in saga.steps.all()}
        item = by_tool["return_item"].input["itemId"]
        refund = by_tool["refund_payment"]
        assert refund.input["chargeId"] == f"ch_{item}", saga.saga_id
        assert refund.output["chargeId"] == f"ch_{item}", saga.saga_id
        assert f"re_{item}" in refund.output.values(), saga.saga_id  # the refund's own id
        assert by_tool["generate_label"].input == {"orderId": f"o-{item}"}, saga.saga_id
        items.append(item)
    assert len(items) == len(set(items)) == 8


def test_the_storebot_demo_steps_agree_with_their_inputs() -> None:
    from undo_core.demos import storebot

    saga, _ = storebot.run()
    for step in saga.steps:
        shared = set(step.input or {}) & set(step.output or {})
        assert {k: step.output[k] for k in shared} == {k: step.input[k] for k in shared}
    assert saga.steps[0].output["itemId"] == saga.steps[0].input["itemId"] == "882"


def test_the_demo_is_refused_where_its_undos_are_not_registered(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = True
    settings.SAGABOARD_COMPENSATION_MODULES = ["shop.undos"]
    with pytest.raises(CommandError, match=r"add sagaboard\.demo\.compensations to SAGABOARD_COMP"):
        call_command("sagaboard_demo")
    assert not Saga.objects.exists()


def test_the_demo_shows_payloads_as_json_never_a_python_repr(settings, client) -> None:  # type: ignore[no-untyped-def]
    """demo-return-failing's event log (and the audit trail) show what the refund's undo
    answered: its output as JSON (``"refund": "re_347"``), not ``{'refund': 're_347'}``."""
    settings.DEBUG = True
    call_command("sagaboard_demo")
    assert client.login(username="demo", password="demo")
    for url in ("/sagas/demo/demo-return-failing/", "/audit/"):
        page = client.get(url).content.decode()
        assert "refund {&quot;refund&quot;: &quot;re_347&quot;, &quot;chargeId&quot;" in page, url
        # A Python repr of a dict or list: {'key': ..., ['x', ...], True/None as values.
        assert "{&#x27;" not in page and "[&#x27;" not in page, url
        assert not re.search(r"&#x27;: (&#x27;|\d|True|False|None)", page), url


# ---------------------------------------------------------------- every flow, by hand


@pytest.fixture
def demo(settings) -> Project:  # type: ignore[no-untyped-def]
    settings.DEBUG = True
    out = StringIO()
    call_command("sagaboard_demo", stdout=out)
    demo = Project.objects.get(slug="demo")
    demo.printed = out.getvalue()  # type: ignore[attr-defined]
    return demo


def user(name: str) -> object:
    return get_user_model().objects.get(username=name)


def test_each_role_has_a_demo_login_with_a_password_that_passes_the_validators(
    demo: Project, client
) -> None:  # type: ignore[no-untyped-def]
    roles = {p.username: p.role for p in DEMO_PEOPLE}
    assert sorted(roles.values()) == ["approver", "approver", "operator", "viewer"]
    for person in DEMO_PEOPLE:
        found = user(person.username)
        assert [g.name for g in found.groups.all()] == [person.role]  # type: ignore[attr-defined]
        assert demo.members.filter(pk=found.pk).exists()  # type: ignore[attr-defined]
        assert not found.is_superuser and not found.is_staff  # type: ignore[attr-defined]
        validate_password(person.password, user=found)  # raises if a validator refuses it
        assert client.login(username=person.username, password=person.password)
        # The command lists each login with what to try with it.
        assert f"{person.username} / {person.password}" in demo.printed  # type: ignore[attr-defined]
    assert user("olga").has_perm("sagaboard.request_rollback")  # type: ignore[attr-defined]
    assert user("anna").has_perm("sagaboard.decide_approval")  # type: ignore[attr-defined]
    assert not user("vic").has_perm("sagaboard.decide_approval")  # type: ignore[attr-defined]
    assert not user("vic").has_perm("sagaboard.request_rollback")  # type: ignore[attr-defined]
    assert "demo / demo" in demo.printed  # type: ignore[attr-defined]


def test_three_undos_posted_by_a_token_no_approver_made_wait_and_one_needs_two_approvers(
    demo: Project,
) -> None:
    pending = Approval.objects.filter(project=demo, status="PENDING").select_related(
        "saga__posted_by_token__created_by"
    )
    by_token = [a for a in pending if a.saga.posted_by_token is not None]
    assert len(pending) == 4 and len(by_token) == 3
    approvers = {p.username for p in DEMO_PEOPLE if p.role == "approver"}
    for approval in by_token:
        token = approval.saga.posted_by_token
        assert token.label == "storebot" and token.created_by.username == "demo"
        assert token.created_by.username not in approvers
    policy = ApprovalPolicy.objects.get(project=demo, name=TWO_APPROVERS)
    assert policy.enabled and policy.approvers_required == 2
    big = Approval.objects.get(saga__saga_id="demo-refund-two-approvers", status="PENDING")
    assert big.required == 2 and big.policy == policy
    # demo-refund-awaiting (item 561, 120) is not under it: one approval settles it.
    assert Approval.objects.get(saga__saga_id="demo-refund-awaiting").required == 1


def test_the_token_maker_is_refused_and_the_two_approvers_settle_the_big_refund(
    demo: Project,
) -> None:
    big = Approval.objects.get(saga__saga_id="demo-refund-two-approvers", status="PENDING")
    with pytest.raises(DecisionRefused, match="you made the token") as refused:
        approval_decide(approval_id=big.pk, user=user("demo"), decision="approve", reason="ok")
    assert refused.value.status == 403
    first = approval_decide(approval_id=big.pk, user=user("anna"), decision="approve", reason="ok")
    assert not first.decided and first.approval.status == "PENDING"
    with pytest.raises(DecisionRefused, match="already approved"):
        approval_decide(approval_id=big.pk, user=user("anna"), decision="approve", reason="ok")
    second = approval_decide(approval_id=big.pk, user=user("amir"), decision="approve", reason="ok")
    assert second.decided and second.approval.status == "APPROVED"
    # demo may decide the one no token of its posted.
    awaiting = Approval.objects.get(saga__saga_id="demo-refund-awaiting")
    mine = approval_decide(
        approval_id=awaiting.pk, user=user("demo"), decision="reject", reason="x"
    )
    assert mine.decided and mine.approval.status == "REJECTED"


def test_an_approver_bulk_approves_the_queued_refunds_from_the_queue(demo: Project, client) -> None:  # type: ignore[no-untyped-def]
    queued = list(
        Approval.objects.filter(
            saga__saga_id__in=["demo-refund-queued-1", "demo-refund-queued-2"], status="PENDING"
        ).values_list("pk", flat=True)
    )
    assert len(queued) == 2
    assert client.login(username="anna", password="anna-demo")
    page = client.get("/approvals/").content.decode()
    for saga_id in ("demo-refund-queued-1", "demo-refund-queued-2", "demo-refund-two-approvers"):
        assert saga_id in page
    answer = client.post(
        "/approvals/bulk/", {"approval": queued, "decision": "approve", "reason": "ok"}
    )
    assert answer.status_code in (200, 302), answer.content[:500]
    assert set(Approval.objects.filter(pk__in=queued).values_list("status", flat=True)) == {
        "APPROVED"
    }


# ---------------------------------------------------------------- the demo's chains
#
# What an operator does first on the demo, then next: each plan line said before the click
# is what then happens (issue 31: a stop and a force-resolve on the demo ended in a false
# ROLLBACK_FAILED), the worker's tasks run as the real ones do (runner.*).


def _demo(settings) -> Any:  # type: ignore[no-untyped-def]
    settings.DEBUG = True
    call_command("sagaboard_demo", stdout=StringIO())
    olga = get_user_model().objects.get(username="olga")
    return Project.objects.get(slug="demo"), olga


def _plan(saga: Saga) -> dict[str, str]:
    from sagaboard.actions.services.work_queues import compensation_plan

    return {line["step"].tool_name: str(line["what"]) for line in compensation_plan(saga)}


def test_stopping_the_demos_running_checkout_rolls_it_back_as_its_plan_said(settings) -> None:  # type: ignore[no-untyped-def]
    from sagaboard.actions.services import runner, saga_stop

    _, olga = _demo(settings)
    saga = Saga.objects.get(saga_id="demo-checkout-running")
    assert _plan(saga) == {"deduct_inventory": "will run unattended"}
    saga_stop.rollback_request(saga_pk=saga.pk, user=olga, reason="customer cancelled")
    assert runner.stop_run(saga.pk) == "ROLLED_BACK"
    step = Step.objects.get(saga=saga)
    assert step.state == "ROLLED_BACK" and step.error is None
    assert step.attempts.get().outcome == "succeeded"


def test_force_resolving_the_demos_stuck_refund_lets_the_worker_undo_the_return(settings) -> None:  # type: ignore[no-untyped-def]
    from sagaboard.actions.services import operator_actions, runner

    _, olga = _demo(settings)
    saga = Saga.objects.get(saga_id="demo-refund-stuck")
    plan = _plan(saga)
    assert plan["return_item"] == "will run unattended"  # what the next undo will do
    refund = Step.objects.get(saga=saga, tool_name="refund_payment")
    assert "Stripe API timed out" in refund.error
    # A retry first: the refund falls under the two-approver policy, so the retry waits
    # for its approvers (no attempt is made, none fails).
    operator_actions.step_act(step_pk=refund.pk, user=olga, action="retry", reason="")
    assert runner.step_action_run(refund.pk) == "waiting for approval"
    refund.refresh_from_db()
    assert refund.state == "ROLLBACK_FAILED" and refund.attempts.count() == 1
    saga.refresh_from_db()
    assert saga.waiting_for == "APPROVAL"
    # Refunded by hand, then force-resolved: the retry's approval is void, the rollback
    # goes on, newest first.
    operator_actions.step_act(
        step_pk=refund.pk, user=olga, action="resolve", reason="refund reversed in Stripe"
    )
    runner.step_action_run(refund.pk)
    saga.refresh_from_db()
    steps = dict(saga.steps.values_list("tool_name", "state"))
    assert steps == {
        "return_item": "ROLLED_BACK", "refund_payment": "RESOLVED", "generate_label": "FAILED"
    }  # fmt: skip
    assert saga.status == "ROLLED_BACK" and saga.waiting_for is None
    assert list(Approval.objects.filter(step=refund).values_list("status", flat=True)) == ["VOID"]


def test_retrying_the_demos_failing_return_fails_once_more_then_succeeds(settings) -> None:  # type: ignore[no-untyped-def]
    from sagaboard.actions.services import operator_actions, runner

    _, olga = _demo(settings)
    saga = Saga.objects.get(saga_id="demo-return-failing")
    step = Step.objects.get(saga=saga, tool_name="return_item")
    outcomes = []
    for _ in range(2):
        operator_actions.step_act(step_pk=step.pk, user=olga, action="retry", reason="")
        runner.step_action_run(step.pk)
        step.refresh_from_db()
        outcomes.append(step.state)
    assert outcomes == ["ROLLBACK_FAILED", "ROLLED_BACK"]
    saga.refresh_from_db()
    assert saga.status == "ROLLED_BACK"

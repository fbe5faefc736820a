"""The demo data a new user sees: real engine runs, loaded once."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from sagaboard.models import Approval, Saga, Step

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]


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
    call_command("sagaboard_demo")
    counts = (Saga.objects.count(), Step.objects.count())
    call_command("sagaboard_demo")
    assert (Saga.objects.count(), Step.objects.count()) == counts


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
    assert len(returns) == 5 and all(s.output is not None for s in returns)
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
    assert len(items) == len(set(items)) == 5


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

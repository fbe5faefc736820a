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

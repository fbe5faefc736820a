"""The API's event log shows operators' decisions beside the engine's events."""

from __future__ import annotations

import pytest
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.actions.services import runner
from sagaboard.approvals.services import approvals
from sagaboard.models import Approval, Project
from tests.support.hitl import person, storebot_server_saga

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]


def test_a_decision_is_in_the_saga_event_log_without_an_engine_seq() -> None:
    shop = Project.objects.create(slug="shop", name="Shop")
    saga = storebot_server_saga(shop)
    runner.rollback_continue(saga.pk)
    approval = Approval.objects.get(saga=saga)
    approvals.approval_decide(
        approval_id=approval.pk, user=person("ann", "approver", shop), decision="approve",
        reason="ok",
    )  # fmt: skip
    secret = token_create(project=shop, label="t").secret
    response = Client().get(
        f"/api/v1/sagas/{saga.saga_id}/events", headers={"authorization": f"Bearer {secret}"}
    )
    assert response.status_code == 200
    ops = [e for e in response.json()["items"] if e["seq"] is None]
    assert [(e["kind"], e["actor"]) for e in ops] == [
        ("approval.requested", "system"),
        ("approval.approve", "user:ann"),
    ]

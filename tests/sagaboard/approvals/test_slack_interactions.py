"""Approve or reject from Slack: the interaction endpoint against a fake that signs as Slack."""

from __future__ import annotations

import time
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from sagaboard.actions.services import runner
from sagaboard.models import (
    ApiToken,
    Approval,
    ApprovalPolicy,
    AuditEntry,
    Notification,
    Project,
    SlackIdentity,
)
from sagaboard.notify.services import notifications
from tests.support.fake_slack import FakeSlack
from tests.support.hitl import person, storebot_server_saga, waiting
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def slack(settings: Any) -> Iterator[FakeSlack]:
    fake = FakeSlack()
    settings.SAGABOARD_SLACK_SIGNING_SECRET = fake.secret
    settings.SAGABOARD_SLACK_RESPONSE_URL_PREFIX = fake.base
    yield fake
    fake.close()


def linked(name: str, role: str, shop: Project) -> str:
    """A person with ``role`` in shop, linked to the Slack user U<NAME> (by the command)."""
    person(name, role, shop)
    call_command("sagaboard_slack_link", f"U{name.upper()}", name, stdout=StringIO())
    return f"U{name.upper()}"


def test_a_signed_click_of_an_approver_decides_and_updates_the_message(
    shop: Project, slack: FakeSlack
) -> None:
    approval = waiting(shop)
    ann = linked("ann", "approver", shop)
    response = slack.click(Client(), ann, "approve", approval.pk)
    assert response.status_code == 200 and response.json()["ok"] is True
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED
    entry = AuditEntry.objects.get(action="approval.approve")
    assert entry.user.username == "ann" and entry.data["via"] == "slack"
    assert entry.reason == "approved from Slack by @uann"
    (update,) = slack.deliver()
    assert update["replace_original"] is True and "Approved by ann" in update["text"]
    assert [b["type"] for b in update["blocks"]] == ["section"]  # no buttons left


def test_a_reject_click_rejects(shop: Project, slack: FakeSlack) -> None:
    approval = waiting(shop)
    response = slack.click(Client(), linked("ann", "approver", shop), "reject", approval.pk)
    assert response.status_code == 200
    approval.refresh_from_db()
    assert approval.status == Approval.Status.REJECTED
    assert "Rejected by ann" in slack.deliver()[0]["text"]


def test_a_bad_signature_is_refused_and_decides_nothing(shop: Project, slack: FakeSlack) -> None:
    approval = waiting(shop)
    ann = linked("ann", "approver", shop)
    body = slack.body(slack.payload(ann, notifications.APPROVE, approval.pk))
    ts = str(int(time.time()))
    forged = slack.send(Client(), body, timestamp=ts, signature=slack.sign(body, ts, "guessed"))
    assert forged.status_code == 401 and forged.json()["error"]["code"] == "bad_signature"
    missing = Client().post("/slack/interactions", body,
                            content_type="application/x-www-form-urlencoded")  # fmt: skip
    assert missing.status_code == 401
    tampered = slack.send(
        Client(), body.replace(b"approve", b"reject"), timestamp=ts, signature=slack.sign(body, ts)
    )
    assert tampered.status_code == 401
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING and not approval.votes.exists()


def test_a_stale_timestamp_is_refused_even_when_signed(shop: Project, slack: FakeSlack) -> None:
    approval = waiting(shop)
    body = slack.body(slack.payload(linked("ann", "approver", shop), "sagaboard_approve",
                                    approval.pk))  # fmt: skip
    old = str(int(time.time()) - 301)
    response = slack.send(Client(), body, timestamp=old)
    assert response.status_code == 401 and response.json()["error"]["code"] == "stale"
    future = slack.send(Client(), body, timestamp=str(int(time.time()) + 400))
    assert future.status_code == 401
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.PENDING


def test_a_replayed_request_is_refused(shop: Project, slack: FakeSlack) -> None:
    approval = waiting(shop)
    reject = slack.body(slack.payload(linked("ann", "approver", shop), "sagaboard_reject",
                                      approval.pk))  # fmt: skip
    ts = str(int(time.time()))
    first = slack.send(Client(), reject, timestamp=ts)
    assert first.status_code == 200
    again = slack.send(Client(), reject, timestamp=ts)
    assert again.status_code == 409 and again.json()["error"]["code"] == "replayed"
    assert Approval.objects.get(pk=approval.pk).votes.count() == 1


def test_an_unlinked_slack_user_is_told_and_nothing_is_decided(
    shop: Project, slack: FakeSlack
) -> None:
    approval = waiting(shop)
    person("ann", "approver", shop)  # a sagaboard approver, but not linked to this Slack user
    response = slack.click(Client(), "UNKNOWN1", "approve", approval.pk)
    assert response.status_code == 200 and response.json()["ok"] is False
    (told,) = slack.deliver()
    assert told["response_type"] == "ephemeral" and told["replace_original"] is False
    assert "sagaboard_slack_link UNKNOWN1" in told["text"]
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.PENDING


def test_a_linked_person_without_the_approver_role_cannot_decide(
    shop: Project, slack: FakeSlack
) -> None:
    approval = waiting(shop)
    response = slack.click(Client(), linked("olly", "operator", shop), "approve", approval.pk)
    assert response.json()["ok"] is False
    (told,) = slack.deliver()
    assert "needs the approver role" in told["text"] and told["replace_original"] is False
    assert not Approval.objects.get(pk=approval.pk).votes.exists()


def test_an_approver_of_another_project_cannot_decide(shop: Project, slack: FakeSlack) -> None:
    approval = waiting(shop)
    other = Project.objects.create(slug="other", name="Other")
    response = slack.click(Client(), linked("sam", "approver", other), "approve", approval.pk)
    assert response.json()["ok"] is False and "no such approval" in response.json()["text"]
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.PENDING


def test_the_person_whose_token_posted_the_saga_cannot_approve_it_from_slack(
    shop: Project, slack: FakeSlack
) -> None:
    bob = linked("bob", "approver", shop)
    token = ApiToken.objects.create(
        project=shop, label="bob's agent", prefix="b0b0b0b0", secret_hash="0",
        created_by=SlackIdentity.objects.get(slack_user_id=bob).user,
    )  # fmt: skip
    saga = storebot_server_saga(shop, token_pk=token.pk)
    runner.rollback_continue(saga.pk)
    approval = Approval.objects.get(saga=saga, status="PENDING")
    response = slack.click(Client(), bob, "approve", approval.pk)
    assert response.json()["ok"] is False and "someone else must decide" in response.json()["text"]
    assert not approval.votes.exists()


def test_four_eyes_a_second_click_by_the_same_person_is_refused_a_second_person_settles(
    shop: Project, slack: FakeSlack
) -> None:
    ApprovalPolicy.objects.create(
        project=shop, name="big refunds", tool_glob="refund_*", approvers_required=2
    )
    saga = storebot_server_saga(shop, refund_needs_approval=False)
    runner.rollback_continue(saga.pk)
    approval = Approval.objects.get(saga=saga, status="PENDING")
    ann, cat = linked("ann", "approver", shop), linked("cat", "approver", shop)

    assert slack.click(Client(), ann, "approve", approval.pk).json()["ok"] is True
    (counted,) = slack.deliver()
    said = "1 of 2 approvals in; one more approver needed (someone other than ann)"
    assert said in counted["text"] and counted["replace_original"] is True
    assert counted["blocks"][-1]["type"] == "actions"  # the buttons stay for the second person

    again = slack.click(Client(), ann, "approve", approval.pk).json()
    assert again["ok"] is False and "second, different person" in again["text"]
    assert slack.deliver()[0]["response_type"] == "ephemeral"

    assert slack.click(Client(), cat, "approve", approval.pk).json()["ok"] is True
    (settled,) = slack.deliver()
    assert "Approved by cat" in settled["text"] and len(settled["blocks"]) == 1
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED and approval.votes.count() == 2


def test_the_outcome_is_only_posted_to_slack(
    shop: Project, slack: FakeSlack, settings: Any
) -> None:
    settings.SAGABOARD_SLACK_RESPONSE_URL_PREFIX = "https://hooks.slack.com/"
    approval = waiting(shop)
    assert slack.click(Client(), linked("ann", "approver", shop), "approve", approval.pk).json()[
        "ok"
    ]
    assert not Notification.objects.filter(kind="slack.response").exists()


def test_without_a_signing_secret_the_endpoint_is_not_there(shop: Project, settings: Any) -> None:
    settings.SAGABOARD_SLACK_SIGNING_SECRET = ""
    assert Client().post("/slack/interactions", {"payload": "{}"}).status_code == 404


def test_a_signed_request_that_is_not_a_button_click_is_a_400(slack: FakeSlack) -> None:
    response = slack.send(Client(), b"payload=not-json")
    assert response.status_code == 400
    other = slack.send(Client(), slack.body({"type": "view_submission"}))
    assert other.status_code == 400 and other.json()["error"]["code"] == "validation_error"


def test_the_approval_message_carries_the_buttons(
    shop: Project, slack: FakeSlack, settings: Any
) -> None:
    receiver = Receiver()
    settings.SAGABOARD_NOTIFY_URL = receiver.url
    try:
        approval = waiting(shop)
        note = Notification.objects.get(kind="approval.created")
        assert notifications.notification_send(note.pk)
    finally:
        receiver.server.shutdown()
    ((body, _),) = receiver.bodies
    actions = body["blocks"][-1]
    assert [e["action_id"] for e in actions["elements"]] == [
        "sagaboard_approve",
        "sagaboard_reject",
    ]
    assert {e["value"] for e in actions["elements"]} == {str(approval.pk)}
    assert all("confirm" in e for e in actions["elements"])  # Slack asks before it sends


def test_the_link_command_links_relinks_and_unlinks(shop: Project) -> None:
    ann = person("ann", "approver", shop)
    out = StringIO()
    call_command("sagaboard_slack_link", "U1", "ann", stdout=out)
    assert "linked Slack user U1 to ann" in out.getvalue()
    call_command("sagaboard_slack_link", "U2", "ann", stdout=StringIO())
    assert list(SlackIdentity.objects.values_list("slack_user_id", "user")) == [("U2", ann.pk)]
    call_command("sagaboard_slack_link", "U2", "--remove", stdout=StringIO())
    assert not SlackIdentity.objects.exists()
    assert AuditEntry.objects.filter(action__startswith="slack.").count() == 3
    with pytest.raises(Exception, match="no sagaboard user 'zed'"):
        call_command("sagaboard_slack_link", "U3", "zed")

"""Decision links: mailed to each person who may decide, opened after login, single use."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from sagaboard.actions.services import runner
from sagaboard.approvals.services import approvals
from sagaboard.models import (
    ApiToken,
    Approval,
    ApprovalPolicy,
    AuditEntry,
    DecisionLink,
    Notification,
    Project,
)
from sagaboard.notify.services import link_tokens, notifications
from tests.support.hitl import person, storebot_server_saga, waiting

pytestmark = pytest.mark.django_db

LINK = re.compile(r"https://board\.example(/decide/[^/\s]+/)")


@pytest.fixture(autouse=True)
def _base_url(settings: Any) -> None:
    settings.SAGABOARD_BASE_URL = "https://board.example"


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def member(name: str, role: str, shop: Project) -> Any:
    user = person(name, role, shop)
    user.email = f"{name}@shop.example"
    user.save(update_fields=["email"])
    return user


def signed_in(user: Any, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def send_mails() -> dict[str, str]:
    """Run the outbox's mail rows (as the worker does): each recipient -> the path mailed."""
    for pk in Notification.objects.filter(kind="approval.email").values_list("pk", flat=True):
        assert notifications.notification_send(pk)
    found = {}
    for message in mail.outbox:
        (path,) = LINK.findall(message.body)
        found[message.to[0]] = path
    return found


def test_each_person_who_may_approve_is_mailed_a_link_of_their_own(shop: Project) -> None:
    member("ann", "approver", shop)
    member("adm", "admin", shop)
    member("olly", "operator", shop)  # may not approve: no mail
    member("vic", "viewer", shop)
    person("noemail", "approver", shop)  # no address: no mail
    waiting(shop)
    assert Notification.objects.filter(kind="approval.email").count() == 2
    assert DecisionLink.objects.get(user__username="ann").token_hash == ""  # minted on send
    links = send_mails()
    assert sorted(links) == ["adm@shop.example", "ann@shop.example"]
    assert links["ann@shop.example"] != links["adm@shop.example"]
    message = next(m for m in mail.outbox if m.to == ["ann@shop.example"])
    assert "refund_payment" in message.subject and "storebot-return" in message.subject
    assert "opening the link" in message.body and "decides once" in message.body
    assert all(len(h) == 64 for h in DecisionLink.objects.values_list("token_hash", flat=True))
    # The token is in the mail only: neither the link row nor the outbox row holds it.
    token = links["ann@shop.example"].split("/")[2]
    assert not Notification.objects.filter(payload__contains=token).exists()


def test_the_person_whose_token_posted_the_saga_is_not_mailed(shop: Project) -> None:
    bob = member("bob", "approver", shop)
    member("ann", "approver", shop)
    token = ApiToken.objects.create(
        project=shop, label="bob's agent", prefix="b0b0b0b0", secret_hash="0", created_by=bob
    )
    runner.rollback_continue(storebot_server_saga(shop, token_pk=token.pk).pk)
    assert list(send_mails()) == ["ann@shop.example"]


def test_opening_the_link_shows_the_approval_and_decides_nothing(shop: Project) -> None:
    ann = member("ann", "approver", shop)
    approval = waiting(shop)
    path = send_mails()["ann@shop.example"]
    page = signed_in(ann).get(path)
    assert page.status_code == 200
    html = page.content.decode()
    for shown in ("refund_payment", "storebot-return", "s-1", "storebot.refund_payment",
                  "0 of 1 approvals", "Approve undo", "Reject", "csrfmiddlewaretoken"):  # fmt: skip
        assert shown in html, shown
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING and not approval.votes.exists()
    assert DecisionLink.objects.get(user=ann).used_at is None


def test_the_link_asks_for_a_login_first(shop: Project) -> None:
    member("ann", "approver", shop)
    waiting(shop)
    path = send_mails()["ann@shop.example"]
    response = Client().get(path)
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=/decide/")


def test_a_link_decides_once(shop: Project) -> None:
    ann = member("ann", "approver", shop)
    approval = waiting(shop)
    path = send_mails()["ann@shop.example"]
    client = signed_in(ann)
    done = client.post(path, {"decision": "approve", "reason": "checked the refund"})
    assert done.status_code == 200 and "Done: the undo is approved." in done.content.decode()
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED
    entry = AuditEntry.objects.get(action="approval.approve")
    assert (
        entry.user == ann and entry.data["via"] == "email" and entry.reason == "checked the refund"
    )
    again = client.post(path, {"decision": "reject", "reason": "changed my mind"})
    assert again.status_code == 410 and "already used" in again.content.decode()
    assert client.get(path).status_code == 410
    assert approval.votes.count() == 1


def test_an_expired_link_is_refused(shop: Project) -> None:
    ann = member("ann", "approver", shop)
    approval = waiting(shop)
    path = send_mails()["ann@shop.example"]
    DecisionLink.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    client = signed_in(ann)
    assert client.get(path).status_code == 410
    refused = client.post(path, {"decision": "approve", "reason": "late"})
    assert refused.status_code == 410 and "expired" in refused.content.decode()
    assert not Approval.objects.get(pk=approval.pk).votes.exists()


def test_the_expiry_is_the_setting(shop: Project, settings: Any) -> None:
    settings.SAGABOARD_DECISION_LINK_HOURS = 2
    member("ann", "approver", shop)
    before = timezone.now()
    waiting(shop)
    link = DecisionLink.objects.get()
    assert timedelta(hours=2) <= link.expires_at - before < timedelta(hours=2, seconds=30)


def test_someone_elses_link_is_refused(shop: Project) -> None:
    member("ann", "approver", shop)
    cat = member("cat", "approver", shop)
    approval = waiting(shop)
    ann_path = send_mails()["ann@shop.example"]
    client = signed_in(cat)
    opened = client.get(ann_path)
    assert opened.status_code == 403 and "sent to someone else" in opened.content.decode()
    posted = client.post(ann_path, {"decision": "approve", "reason": "me"})
    assert posted.status_code == 403
    assert not Approval.objects.get(pk=approval.pk).votes.exists()


def test_a_forged_or_altered_link_is_a_clear_404(shop: Project) -> None:
    ann = member("ann", "approver", shop)
    waiting(shop)
    path = send_mails()["ann@shop.example"]
    client = signed_in(ann)
    token = path.split("/")[2]
    for bad in ("garbage", token[:-2] + ("AA" if not token.endswith("AA") else "BB"),
                token.replace(":", "", 1)):  # fmt: skip
        response = client.get(f"/decide/{bad}/")
        assert (
            response.status_code == 404 and "not a valid decision link" in response.content.decode()
        )


def test_a_newer_mail_replaces_the_older_link(shop: Project) -> None:
    ann = member("ann", "approver", shop)
    waiting(shop)
    link = DecisionLink.objects.get()
    old = link_tokens.link_mint(link)
    new = link_tokens.link_mint(link)
    client = signed_in(ann)
    assert client.get(f"/decide/{old}/").status_code == 404
    assert client.get(f"/decide/{new}/").status_code == 200


def test_a_refused_decision_keeps_the_link(shop: Project) -> None:
    ann = member("ann", "approver", shop)
    approval = waiting(shop)
    path = send_mails()["ann@shop.example"]
    client = signed_in(ann)
    refused = client.post(path, {"decision": "approve", "reason": ""})
    assert refused.status_code == 400 and "a reason is required" in refused.content.decode()
    assert DecisionLink.objects.get().used_at is None
    assert client.post(path, {"decision": "approve", "reason": "ok"}).status_code == 200
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.APPROVED


def test_a_link_follows_the_rules_of_the_queue_page(shop: Project) -> None:
    """Four eyes: each approver's own link counts one vote; someone who lost the role can't."""
    ApprovalPolicy.objects.create(
        project=shop, name="big refunds", tool_glob="refund_*", approvers_required=2
    )
    ann, cat, dan = (member(n, "approver", shop) for n in ("ann", "cat", "dan"))
    saga = storebot_server_saga(shop, refund_needs_approval=False)
    runner.rollback_continue(saga.pk)
    approval = Approval.objects.get(saga=saga, status="PENDING")
    links = send_mails()
    first = signed_in(ann).post(links["ann@shop.example"], {"decision": "approve", "reason": "a"})
    said = "Your approval is counted: 1 of 2 approvals in; one more approver needed."
    assert first.status_code == 200 and said in first.content.decode()
    dan.groups.clear()
    lost = signed_in(dan).post(links["dan@shop.example"], {"decision": "approve", "reason": "b"})
    assert lost.status_code == 403 and "approver role" in lost.content.decode()
    second = signed_in(cat).post(links["cat@shop.example"], {"decision": "approve", "reason": "c"})
    assert second.status_code == 200 and "approved" in second.content.decode()
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED and approval.votes.count() == 2


def test_a_cross_site_post_is_refused(shop: Project) -> None:
    ann = member("ann", "approver", shop)
    approval = waiting(shop)
    path = send_mails()["ann@shop.example"]
    response = signed_in(ann, enforce_csrf_checks=True).post(
        path, {"decision": "approve", "reason": "x"}
    )
    assert response.status_code == 403
    assert not Approval.objects.get(pk=approval.pk).votes.exists()


def test_a_mail_is_not_sent_once_the_approval_is_decided(shop: Project) -> None:
    member("ann", "approver", shop)
    cat = member("cat", "approver", shop)
    approval = waiting(shop)
    approvals.approval_decide(approval_id=approval.pk, user=cat, decision="reject", reason="no")
    assert send_mails() == {}
    assert (
        Notification.objects.filter(kind="approval.email", delivered_at__isnull=False).count() == 2
    )


def test_a_failed_mail_is_retried(shop: Project, settings: Any) -> None:
    member("ann", "approver", shop)
    waiting(shop)
    smtp = "django.core.mail.backends.smtp.EmailBackend"  # nothing listens on port 9
    settings.MAILERS = {
        "default": {"BACKEND": smtp, "OPTIONS": {"host": "127.0.0.1", "port": 9, "timeout": 1}}
    }
    note = Notification.objects.get(kind="approval.email")
    assert not notifications.notification_send(note.pk)
    note.refresh_from_db()
    assert note.attempts == 1 and note.delivered_at is None and note.last_error


def test_mails_can_be_turned_off(shop: Project, settings: Any) -> None:
    settings.SAGABOARD_EMAIL_APPROVALS = False
    member("ann", "approver", shop)
    waiting(shop)
    assert not Notification.objects.filter(kind="approval.email").exists()


def test_a_link_to_an_approval_decided_meanwhile_says_so(shop: Project) -> None:
    ann, cat = member("ann", "approver", shop), member("cat", "approver", shop)
    approval = waiting(shop)
    path = send_mails()["ann@shop.example"]
    approvals.approval_decide(approval_id=approval.pk, user=cat, decision="approve", reason="ok")
    client = signed_in(ann)
    page = client.get(path)
    assert page.status_code == 200 and "Nothing left to decide" in page.content.decode()
    assert "Approve undo</button>" not in page.content.decode()
    late = client.post(path, {"decision": "reject", "reason": "too late"})
    assert late.status_code == 409 and "already decided: approved by cat" in late.content.decode()
    assert approval.votes.count() == 1


def test_after_logging_in_the_person_is_back_on_the_link(shop: Project) -> None:
    ann = member("ann", "approver", shop)
    ann.set_password("pw-ann-123456")
    ann.save()
    waiting(shop)
    path = send_mails()["ann@shop.example"]
    client = Client()
    login = client.get(path)["Location"]
    back = client.post(login, {"username": "ann", "password": "pw-ann-123456"})
    assert back.status_code == 302 and back["Location"] == path
    assert client.get(path).status_code == 200

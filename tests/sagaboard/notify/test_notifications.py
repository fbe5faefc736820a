"""Outgoing notifications: Slack-compatible, HMAC-signed, retried until the receiver takes them."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from sagaboard.actions.services import runner
from sagaboard.models import Notification, Project
from sagaboard.notify.services import notifications
from tests.support.hitl import storebot_server_saga
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.django_db


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    r = Receiver()
    settings.SAGABOARD_NOTIFY_URL = r.url
    settings.SAGABOARD_WEBHOOK_SECRET = "s3cret"
    settings.SAGABOARD_BASE_URL = "https://board.example"
    yield r
    r.server.shutdown()


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def test_an_approval_and_a_failed_undo_are_announced_with_links(
    shop: Project, receiver: Receiver
) -> None:
    waiting = storebot_server_saga(shop, "s-1")
    runner.rollback_continue(waiting.pk)
    failing = storebot_server_saga(shop, "f-1", refund_needs_approval=False, return_fails_first=9)
    runner.rollback_continue(failing.pk)
    kinds = list(Notification.objects.order_by("pk").values_list("kind", flat=True))
    assert kinds == ["approval.created", "step.rollback_failed"]
    for note in Notification.objects.order_by("pk"):
        assert notifications.notification_send(note.pk)
    (created, signature), (failed, _) = receiver.bodies
    assert (
        "needs approval" in created["text"]
        and "https://board.example/approvals/" in created["text"]
    )
    # Each links to its step's card by the step's own id (a permalink), never a database key.
    step = failed["sagaboard"]["step_id"]
    assert failed["sagaboard"]["url"] == f"https://board.example/sagas/shop/f-1/#step-{step}"
    assert created["sagaboard"]["url"].startswith("https://board.example/sagas/shop/s-1/#step-")
    approval = created["sagaboard"]["approval"]
    assert created["sagaboard"]["approval_url"] == f"https://board.example/approvals/{approval}/"
    assert "return_item" in failed["text"] and "upstream timed out" in failed["text"]
    expected = hmac.new(b"s3cret", receiver.raw, hashlib.sha256).hexdigest()
    assert receiver.bodies[-1][1] == f"sha256={expected}"
    assert signature.startswith("sha256=")


def test_a_failed_delivery_is_retried_later_until_it_succeeds(
    shop: Project, receiver: Receiver
) -> None:
    saga = storebot_server_saga(shop, "s-1")
    runner.rollback_continue(saga.pk)
    note = Notification.objects.get()
    receiver.statuses = [500]
    assert not notifications.notification_send(note.pk)
    note.refresh_from_db()
    assert note.attempts == 1 and "HTTP 500" in note.last_error and note.delivered_at is None
    assert note.next_attempt_at > timezone.now()
    assert notifications.notifications_due() == []  # not before its backoff
    Notification.objects.filter(pk=note.pk).update(
        next_attempt_at=timezone.now() - timedelta(seconds=1)
    )
    assert notifications.notifications_due() == [note.pk]
    assert notifications.notification_send(note.pk)
    note.refresh_from_db()
    assert note.delivered_at is not None and note.attempts == 2
    assert notifications.notification_send(note.pk)  # delivered once: nothing sent again
    assert len(receiver.bodies) == 2


def test_nothing_is_queued_without_a_notification_url(shop: Project, settings: Any) -> None:
    settings.SAGABOARD_NOTIFY_URL = ""
    saga = storebot_server_saga(shop, "s-1")
    runner.rollback_continue(saga.pk)
    assert not Notification.objects.exists()

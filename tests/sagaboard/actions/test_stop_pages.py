"""Stopping a running saga from its page: the form, the refusals, the request's state shown."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from sagaboard.actions.services import saga_stop
from sagaboard.models import AuditEntry, Project, Saga
from tests.support.hitl import person

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def saga(shop: Project) -> Saga:
    return Saga.objects.create(
        project=shop, saga_id="s-1", name="order", status="IN_PROGRESS",
        created_at="2026-03-01T12:00:00Z", updated_at="2026-03-01T12:00:00Z",
    )  # fmt: skip


def browser(user: object) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_operator_requests_it_from_the_page_and_sees_it_waiting_for_the_agent(
    shop: Project, saga: Saga
) -> None:
    ann = browser(person("ann", "operator", shop))
    page = ann.get("/sagas/shop/s-1/").content.decode()
    assert 'id="stop"' in page and f'action="/sagas/{saga.pk}/rollback-request/"' in page
    answer = ann.post(f"/sagas/{saga.pk}/rollback-request/", {"reason": "wrong customer"})
    assert answer.status_code == 302 and answer["Location"] == "/sagas/shop/s-1/#stop-state"
    page = ann.get("/sagas/shop/s-1/").content.decode()
    # One message, the stop state's (read from the record and kept live), no flash beside it.
    assert "Rollback requested:" not in page and "message success" not in page
    assert "Rollback requested by <strong>ann</strong>" in page
    assert "the agent rolls back at its next step boundary" in page
    assert "waiting for the agent&#x27;s next step" in page or "waiting for the agent's" in page
    assert "Reason: wrong customer" in page
    assert 'id="stop-title"' not in page  # no second request offered
    assert AuditEntry.objects.filter(action="saga.stop_requested").count() == 1


def test_the_page_says_when_the_agent_was_told_and_when_it_is_overdue(
    shop: Project, saga: Saga
) -> None:
    saga_stop.rollback_request(saga_pk=saga.pk, user=person("ann", "operator", shop), reason="x")
    saga_stop.rollback_requests_for(shop)
    vic = browser(person("vic", "viewer", shop))
    page = vic.get("/sagas/shop/s-1/").content.decode()
    assert "the agent was told" in page and "Overdue" not in page
    Saga.objects.filter(pk=saga.pk).update(rollback_request_overdue_at=timezone.now())
    page = vic.get("/sagas/shop/s-1/").content.decode()
    assert 'class="banner" role="status"' in page and "Overdue" in page
    assert "the agent may be gone" in page


def test_a_viewer_sees_no_form_and_a_post_is_refused_with_a_message(
    shop: Project, saga: Saga
) -> None:
    vic = browser(person("vic", "viewer", shop))
    page = vic.get("/sagas/shop/s-1/").content.decode()
    assert "needs the operator role" in page and "Request rollback</button>" not in page
    answer = vic.post(f"/sagas/{saga.pk}/rollback-request/", {"reason": "x"})
    assert answer.status_code == 403
    assert "needs the operator role" in answer.content.decode()
    saga.refresh_from_db()
    assert saga.rollback_requested_at is None


@pytest.mark.parametrize(
    ("status", "reason", "code", "says"),
    [("IN_PROGRESS", " ", 400, "a reason is required"),
     ("COMPLETED", "x", 409, "only a running saga can be stopped: this one is COMPLETED")],
)  # fmt: skip
def test_a_refusal_is_a_page_with_its_status_and_why_never_a_500(
    shop: Project, saga: Saga, status: str, reason: str, code: int, says: str
) -> None:
    Saga.objects.filter(pk=saga.pk).update(status=status)
    ann = browser(person("ann", "operator", shop))
    answer = ann.post(f"/sagas/{saga.pk}/rollback-request/", {"reason": reason})
    assert answer.status_code == code and says in answer.content.decode()


def test_a_second_request_and_another_projects_saga_are_refused(shop: Project, saga: Saga) -> None:
    ann = browser(person("ann", "operator", shop))
    assert ann.post(f"/sagas/{saga.pk}/rollback-request/", {"reason": "a"}).status_code == 302
    again = ann.post(f"/sagas/{saga.pk}/rollback-request/", {"reason": "b"})
    assert again.status_code == 409 and "already requested by user:ann" in again.content.decode()
    outsider = person("out", "operator", Project.objects.create(slug="other", name="Other"))
    assert (
        browser(outsider).post(f"/sagas/{saga.pk}/rollback-request/", {"reason": "c"}).status_code
        == 404
    )


def test_a_completed_request_is_shown_as_history(shop: Project, saga: Saga) -> None:
    saga_stop.rollback_request(saga_pk=saga.pk, user=person("ann", "operator", shop), reason="x")
    Saga.objects.filter(pk=saga.pk).update(
        status="ROLLED_BACK", rollback_request_done_at=timezone.now() + timedelta(seconds=1)
    )
    page = browser(person("vic", "viewer", shop)).get("/sagas/shop/s-1/").content.decode()
    assert 'id="stop-state" class="muted"' in page and 'id="stop"' not in page
    assert "(carried out)" in page
    Saga.objects.filter(pk=saga.pk).update(status="COMPLETED")
    page = browser(person("val", "viewer", shop)).get("/sagas/shop/s-1/").content.decode()
    assert "came too late: the saga completed before its agent heard it" in page


def test_an_overdue_request_is_in_the_operators_inbox(shop: Project, saga: Saga) -> None:
    ann = person("ann", "operator", shop)
    saga_stop.rollback_request(saga_pk=saga.pk, user=ann, reason="x")
    inbox = browser(ann).get("/inbox/").content.decode()
    assert "Rollback requests overdue" not in inbox
    Saga.objects.filter(pk=saga.pk).update(rollback_request_overdue_at=timezone.now())
    inbox = browser(ann).get("/inbox/").content.decode()
    assert "Rollback requests overdue (1)" in inbox and "/sagas/shop/s-1/#stop-state" in inbox
    viewer_inbox = browser(person("vic", "viewer", shop)).get("/inbox/").content.decode()
    assert "Rollback requests overdue" not in viewer_inbox

"""Stopping a running saga: who may ask, what is refused, who carries it out, and an agent gone."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from sagaboard.actions.services import runner, saga_stop
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.models import AuditEntry, Event, Notification, Project, Saga, Step
from sagaboard.record.services import manual_flow
from tests.support.hitl import person

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def agent_saga(shop: Project, saga_id: str = "s-1", status: str = "IN_PROGRESS") -> Saga:
    return Saga.objects.create(
        project=shop, saga_id=saga_id, name="order", status=status,
        created_at="2026-03-01T12:00:00Z", updated_at="2026-03-01T12:00:00Z",
    )  # fmt: skip


def server_saga(shop: Project, saga_id: str = "srv-1") -> Saga:
    """Run by sagaboard: two completed steps whose undos are server-side handlers."""

    def eid() -> str:
        return uuid.uuid4().hex

    manual_flow.saga_begin(project=shop, event_id=eid(), name="storebot", saga_id=saga_id)
    for tool, handler in (("return_item", "storebot.return_item"),
                          ("refund_payment", "storebot.refund_payment")):  # fmt: skip
        step_id = manual_flow.step_add(
            project=shop, event_id=eid(), saga_id=saga_id, tool_name=tool,
            input={"itemId": "1", "chargeId": "ch_1"},
            undo={"kind": "handler", "handler": handler},
        )  # fmt: skip
        manual_flow.step_complete(
            project=shop, event_id=eid(), saga_id=saga_id, step_id=step_id, output={"ok": 1}
        )
    return Saga.objects.get(project=shop, saga_id=saga_id)


def refusal(**kwargs: Any) -> DecisionRefused:
    with pytest.raises(DecisionRefused) as err:
        saga_stop.rollback_request(**kwargs)
    return err.value


def test_an_operator_requests_the_rollback_with_a_reason_audited_and_on_the_timeline(
    shop: Project,
) -> None:
    saga = agent_saga(shop)
    ann = person("ann", "operator", shop)
    stopped = saga_stop.rollback_request(saga_pk=saga.pk, user=ann, reason="  wrong customer ")
    assert stopped.rollback_request_pending and stopped.rollback_requested_by == ann
    assert stopped.rollback_request_reason == "wrong customer"
    assert stopped.status == "IN_PROGRESS"  # the agent rolls back; nothing moved here
    entry = AuditEntry.objects.get(action="saga.stop_requested")
    assert (entry.actor, entry.target, entry.reason) == ("user:ann", "saga:s-1", "wrong customer")
    event = Event.objects.get(saga=saga, kind="saga.stop_requested")
    assert (event.actor, event.to_state, event.seq) == ("user:ann", "ROLLBACK_REQUESTED", None)
    assert stopped.rollback_request_heard_at is None  # the agent has not been told yet


@pytest.mark.parametrize(
    ("role", "reason", "status", "field"),
    [("viewer", "why", 403, None), ("approver", "why", 403, None),
     ("operator", "  ", 400, "reason"), ("operator", "x" * 2001, 400, "reason")],
)  # fmt: skip
def test_a_request_without_the_role_or_a_reason_is_refused_and_changes_nothing(
    shop: Project, role: str, reason: str, status: int, field: str | None
) -> None:
    saga = agent_saga(shop)
    err = refusal(saga_pk=saga.pk, user=person("u", role, shop), reason=reason)
    assert (err.status, err.field) == (status, field)
    saga.refresh_from_db()
    assert saga.rollback_requested_at is None and not AuditEntry.objects.exists()


def test_a_saga_outside_my_projects_is_not_found(shop: Project) -> None:
    saga = agent_saga(shop)
    outsider = person("out", "operator", Project.objects.create(slug="other", name="Other"))
    err = refusal(saga_pk=saga.pk, user=outsider, reason="x")
    assert (err.status, err.code) == (404, "not_found")
    assert "shop" not in err.message


@pytest.mark.parametrize("status", ["COMPLETED", "COMPENSATING", "ROLLED_BACK", "FAILED"])
def test_only_a_running_saga_can_be_stopped(shop: Project, status: str) -> None:
    saga = agent_saga(shop, status=status)
    err = refusal(saga_pk=saga.pk, user=person("ann", "operator", shop), reason="x")
    assert err.status == 409 and status in err.message


def test_a_second_request_is_refused_naming_who_asked_first(shop: Project) -> None:
    saga = agent_saga(shop)
    saga_stop.rollback_request(saga_pk=saga.pk, user=person("ann", "operator", shop), reason="a")
    err = refusal(saga_pk=saga.pk, user=person("bob", "operator", shop), reason="b")
    assert err.status == 409 and "already requested by user:ann" in err.message
    assert AuditEntry.objects.count() == 1


def test_the_agent_hears_it_and_its_rollback_closes_the_request(shop: Project) -> None:
    saga = agent_saga(shop)
    other = agent_saga(shop, "s-2")
    saga_stop.rollback_request(saga_pk=saga.pk, user=person("ann", "operator", shop), reason="a")
    # (saga id, status after the batch) of the batch's sagas with a request open, as
    # ingestion reads them under its lock (tests/sagaboard/record: which sagas those are).
    asked = saga_stop.after_batch(shop, [("s-1", "IN_PROGRESS")])
    assert [(a["saga_id"], a["by"], a["reason"]) for a in asked] == [("s-1", "user:ann", "a")]
    saga.refresh_from_db()
    assert saga.rollback_request_heard_at is not None
    Saga.objects.filter(pk=saga.pk).update(status="COMPENSATING")  # the agent's next events
    assert saga_stop.after_batch(shop, [("s-1", "COMPENSATING")]) == []
    saga.refresh_from_db()
    assert not saga.rollback_request_pending and saga.rollback_request_done_at is not None
    assert AuditEntry.objects.filter(action="saga.stop_done", actor="agent").exists()
    assert saga_stop.rollback_requests_for(shop) == []
    other.refresh_from_db()
    assert other.rollback_requested_at is None


def test_a_saga_that_completed_before_hearing_closes_the_request_as_moot(shop: Project) -> None:
    saga = agent_saga(shop)
    saga_stop.rollback_request(saga_pk=saga.pk, user=person("ann", "operator", shop), reason="a")
    Saga.objects.filter(pk=saga.pk).update(status="COMPLETED")
    saga_stop.after_batch(shop, [("s-1", "COMPLETED")])
    entry = AuditEntry.objects.get(action="saga.stop_moot")
    assert "came too late: the saga completed first" in entry.reason


def test_a_request_never_heard_becomes_overdue_once_and_people_are_told(
    shop: Project, settings: Any
) -> None:
    settings.SAGABOARD_NOTIFY_URL = "http://127.0.0.1:9/hook"
    settings.SAGABOARD_STOP_OVERDUE_SECONDS = 60
    saga = agent_saga(shop)
    saga_stop.rollback_request(saga_pk=saga.pk, user=person("ann", "operator", shop), reason="a")
    assert saga_stop.requests_overdue() == 0  # not yet
    Saga.objects.filter(pk=saga.pk).update(
        rollback_requested_at=timezone.now() - timedelta(seconds=61)
    )
    assert saga_stop.requests_overdue() == 1
    assert saga_stop.requests_overdue() == 0  # marked once
    saga.refresh_from_db()
    assert saga.rollback_request_overdue_at is not None and saga.rollback_request_pending
    entry = AuditEntry.objects.get(action="saga.stop_overdue")
    assert entry.actor == "system" and "has not been heard from" in entry.reason
    note = Notification.objects.get(kind="saga.stop_overdue")
    assert "requested by ann, is overdue" in note.payload["text"]
    # An agent that comes back still hears it.
    assert [a["saga_id"] for a in saga_stop.rollback_requests_for(shop)] == ["s-1"]


def test_a_saga_sagaboard_runs_is_rolled_back_by_the_worker_newest_first(shop: Project) -> None:
    saga = server_saga(shop)
    ann = person("ann", "operator", shop)
    saga_stop.rollback_request(saga_pk=saga.pk, user=ann, reason="stop it")
    assert runner.stop_run(saga.pk) == "ROLLED_BACK"
    saga.refresh_from_db()
    assert saga.status == "ROLLED_BACK" and not saga.rollback_request_pending
    states = dict(Step.objects.filter(saga=saga).values_list("tool_name", "state"))
    assert states == {"return_item": "ROLLED_BACK", "refund_payment": "ROLLED_BACK"}
    undone = Event.objects.filter(saga=saga, to_state="ROLLED_BACK", step_id__isnull=False)
    order = list(dict.fromkeys(undone.order_by("id").values_list("step_id", flat=True)))
    assert order == ["step-2", "step-1"]
    began = Event.objects.get(saga=saga, step_id__isnull=True, to_state="COMPENSATING")
    assert began.actor == "user:ann"
    assert AuditEntry.objects.filter(action="saga.stop_done", actor="worker").exists()
    assert runner.stop_run(saga.pk) == "nothing requested"  # redelivered: harmless


def test_a_lost_worker_task_is_picked_up_by_the_sweep(shop: Project) -> None:
    saga = server_saga(shop)
    saga_stop.rollback_request(saga_pk=saga.pk, user=person("ann", "operator", shop), reason="x")
    Saga.objects.filter(pk=saga.pk).update(
        rollback_requested_at=timezone.now() - timedelta(minutes=5)
    )
    assert ("stop", saga.pk) in runner.orphaned_work()

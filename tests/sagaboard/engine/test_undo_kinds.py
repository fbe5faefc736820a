"""Undos sagaboard runs itself: a signed webhook, a shell command (off by default), a handler."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest

from sagaboard.actions.services import runner, work_queues
from sagaboard.approvals.services import approvals
from sagaboard.engine.services.undo_kinds import COMMAND_ENV, plan_for, plan_hash
from sagaboard.models import Approval, Event, Project, Saga, Step
from tests.support.hitl import one_step_saga
from tests.support.webhook_receiver import Receiver

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def test_a_webhook_undo_posts_the_step_signed_with_its_idempotency_key(
    shop: Project, settings: Any
) -> None:
    receiver = Receiver()
    settings.SAGABOARD_WEBHOOK_SECRET = "hook-secret"
    try:
        saga = one_step_saga(shop, {"kind": "webhook", "url": receiver.url})
        assert runner.rollback_continue(saga.pk) == "ROLLED_BACK"
    finally:
        receiver.server.shutdown()
    ((body, signature),) = receiver.bodies
    step = Step.objects.get(saga=saga)
    assert body == {
        "saga_id": "k-1", "step_id": "step-1", "tool_name": "create_ticket",
        "idempotency_key": step.idempotency_key, "input": {"title": "disk full"},
        "output": {"id": "T-9"},
    }  # fmt: skip
    assert (
        signature == "sha256=" + hmac.new(b"hook-secret", receiver.raw, hashlib.sha256).hexdigest()
    )


def test_a_webhook_that_answers_an_error_fails_the_undo(shop: Project) -> None:
    receiver = Receiver()
    receiver.statuses = [503]
    try:
        saga = one_step_saga(shop, {"kind": "webhook", "url": receiver.url})
        assert runner.rollback_continue(saga.pk) == "ROLLBACK_FAILED"
    finally:
        receiver.server.shutdown()
    assert "webhook answered 503" in (Step.objects.get(saga=saga).error or "")


def decide(saga: Saga) -> None:
    from tests.support.hitl import person

    approval = Approval.objects.get(saga=saga, status="PENDING")
    approvals.approval_decide(
        approval_id=approval.pk, user=person("ann", "approver", saga.project),
        decision="approve", reason="the command is right",
    )  # fmt: skip


def test_a_command_undo_waits_for_approval_and_fails_if_commands_were_switched_off_since(
    shop: Project, settings: Any
) -> None:
    settings.SAGABOARD_ALLOW_COMMAND_UNDOS = True
    saga = one_step_saga(shop, {"kind": "command", "command": "echo undone"})
    assert runner.rollback_continue(saga.pk) == "COMPENSATING"
    approval = Approval.objects.get(saga=saga)
    assert approval.plan == {
        "kind": "command", "command": "echo undone", "argv": ["echo", "undone"],
        "cwd": str(settings.SAGABOARD_COMMAND_UNDO_CWD), "env": COMMAND_ENV,
    }  # fmt: skip
    settings.SAGABOARD_ALLOW_COMMAND_UNDOS = False
    (item,) = work_queues.compensation_plan(saga)
    assert item["what"].startswith("cannot run here: command undos are off on this server")
    decide(saga)
    assert runner.rollback_continue(saga.pk) == "ROLLBACK_FAILED"
    assert "cannot run here: command undos are off" in (Step.objects.get(saga=saga).error or "")


def test_an_enabled_command_runs_without_a_shell_and_its_output_is_kept(
    shop: Project, settings: Any
) -> None:
    settings.SAGABOARD_ALLOW_COMMAND_UNDOS = True
    saga = one_step_saga(shop, {"kind": "command", "command": "echo 'undone; rm -rf /' $HOME"})
    runner.rollback_continue(saga.pk)
    decide(saga)
    assert runner.rollback_continue(saga.pk) == "ROLLED_BACK"
    output = Event.objects.get(saga=saga, kind="undo.output").detail
    assert output == "undone; rm -rf / $HOME\n"  # one argument, no shell expansion


def test_a_command_that_overruns_its_timeout_fails(shop: Project, settings: Any) -> None:
    settings.SAGABOARD_ALLOW_COMMAND_UNDOS = True
    settings.SAGABOARD_UNDO_TIMEOUT_SECONDS = 0.3
    saga = one_step_saga(shop, {"kind": "command", "command": "sleep 5"})
    runner.rollback_continue(saga.pk)
    decide(saga)
    assert runner.rollback_continue(saga.pk) == "ROLLBACK_FAILED"
    assert "timed out" in (Step.objects.get(saga=saga).error or "")


@pytest.mark.record_rewritten("step.undo")  # a handler stored before the add-step check
def test_a_stored_unregistered_handler_shows_in_the_plan_and_fails_naming_it(
    shop: Project,
) -> None:
    saga = one_step_saga(shop, {"kind": "handler", "handler": "storebot.return_item"})
    # Stored before its module left SAGABOARD_COMPENSATION_MODULES (adding it is refused now).
    Step.objects.filter(saga=saga).update(undo={"kind": "handler", "handler": "nope.never"})
    (item,) = work_queues.compensation_plan(saga)
    assert item["what"].startswith("cannot run here: no compensation 'nope.never' is registered")
    assert runner.rollback_continue(saga.pk) == "ROLLBACK_FAILED"
    error = Step.objects.get(saga=saga).error or ""
    assert "cannot run here: no compensation 'nope.never' is registered" in error


def test_the_plan_hash_changes_with_what_would_run(shop: Project) -> None:
    saga = one_step_saga(shop, {"kind": "webhook", "url": "https://a.example/undo"})
    step = Step.objects.get(saga=saga)
    before = plan_hash(plan_for(saga, step))
    step.undo = {"kind": "webhook", "url": "https://b.example/undo"}
    assert plan_hash(plan_for(saga, step)) != before
    step.undo = {"kind": "webhook", "url": "https://a.example/undo"}
    step.output = {"id": "T-10"}
    assert plan_hash(plan_for(saga, step)) != before  # the body changed too
    assert json.dumps(plan_for(saga, step)["body"]["output"]) == '{"id": "T-10"}'

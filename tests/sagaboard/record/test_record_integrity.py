"""The record cannot be rewritten around the state machine, whatever the event kind.

Each exploit of issue 14 is tried with a project token through ``POST /api/v1/events``:
every one is refused with a 4xx naming the rule (code) and the field, and nothing of
the record changes. Then ``manage.py sagaboard_verify`` is shown to find a record
changed behind its event log.
"""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import pytest
from django.core.management import call_command, load_command_class
from django.core.management.base import CommandError
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.models import CompensationAttempt, Event, Project, Saga, Step
from sagaboard.record.services.verify import verify
from tests.support.agent_runs import paused_storebot_events, post_events, storebot_events

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]


@pytest.fixture
def post(client: Client) -> Any:
    token = token_create(project=Project.objects.create(slug="shop", name="Shop"), label="t")

    def post(events: list[dict[str, Any]]) -> Any:
        return post_events(client, token.secret, events)

    return post


def tables() -> Any:
    return (
        list(Saga.objects.order_by("pk").values()),
        list(Step.objects.order_by("pk").values()),
        list(CompensationAttempt.objects.order_by("pk").values()),
        list(Event.objects.order_by("pk").values()),
    )


def after(
    log: list[dict[str, Any]],
    kind: str,
    *,
    step: dict[str, Any] | None = None,
    saga: dict[str, Any] | None = None,
    from_state: str | None = None,
    to_state: str | None = None,
) -> dict[str, Any]:
    """The next event of the saga whose accepted events are ``log``, as a client could forge it."""
    last = log[-1]
    seq = last["saga"]["seq"] + 1
    record = {**copy.deepcopy(last["saga"]), "seq": seq, **(saga or {})}
    to = to_state or (step["state"] if step is not None else record["status"])
    return {
        "event_id": f"forged-{seq}-{kind}",
        "type": "transition",
        "saga": record,
        "step": step,
        "event": {
            **last["event"],
            "seq": seq,
            "kind": kind,
            "step_id": step["id"] if step else None,
            "tool_name": step["tool_name"] if step else None,
            "from_state": from_state,
            "to_state": to,
        },
    }


def latest(log: list[dict[str, Any]], step_id: str) -> dict[str, Any]:
    """The step as the last accepted event that carried it."""
    step = [e["step"] for e in log if e["step"] and e["step"]["id"] == step_id][-1]
    return copy.deepcopy(step)


def refused(post: Any, event: dict[str, Any], status: int, code: str, field: str) -> str:
    before = tables()
    response = post([event])
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert (error["code"], error["field"]) == (code, field), error
    assert tables() == before, "a refused event changed the record"
    return str(error["message"])


@pytest.fixture
def failed_undo(post: Any) -> list[dict[str, Any]]:
    """StoreBot whose return_item undo failed: saga ROLLBACK_FAILED, step-1 ROLLBACK_FAILED."""
    log = paused_storebot_events("s-1", refund_approval=False, return_undo_fails=True)
    assert post(log).status_code == 200
    assert Saga.objects.get().status == "ROLLBACK_FAILED"
    return log


@pytest.fixture
def rolled_back(post: Any) -> list[dict[str, Any]]:
    log = storebot_events("s-1")
    assert post(log).status_code == 200
    assert Saga.objects.get().status == "ROLLED_BACK"
    return log


# ---------------------------------------------------------------- hiding a failed undo


def test_it_refuses_a_checkpoint_that_flips_a_failed_rollback_to_rolled_back(
    post: Any, failed_undo: list[dict[str, Any]]
) -> None:
    flip = after(failed_undo, "checkpoint", saga={"status": "ROLLED_BACK"})
    message = refused(post, flip, 409, "illegal_transition", "saga.status")
    assert "only a saga event changes its status" in message


def test_it_refuses_a_saga_event_to_rolled_back_while_an_undo_is_still_failed(
    post: Any, failed_undo: list[dict[str, Any]]
) -> None:
    flip = after(failed_undo, "saga", saga={"status": "ROLLED_BACK"}, from_state="ROLLBACK_FAILED")
    message = refused(post, flip, 409, "illegal_transition", "event.to_state")
    assert "cannot be ROLLED_BACK" in message


def test_it_refuses_an_attempt_event_that_rewrites_a_recorded_attempt(
    post: Any, failed_undo: list[dict[str, Any]]
) -> None:
    step = latest(failed_undo, "step-1")
    step["attempts"][0]["outcome"] = "succeeded"
    step["attempts"][0]["error"] = None
    forged = after(
        failed_undo, "attempt", step=step, from_state="ROLLBACK_FAILED", to_state="ROLLBACK_FAILED"
    )
    refused(post, forged, 409, "illegal_transition", "step.state")


def test_it_refuses_a_step_move_that_rewrites_or_drops_a_recorded_attempt(
    post: Any, failed_undo: list[dict[str, Any]]
) -> None:
    step = latest(failed_undo, "step-1")
    step["state"], step["attempts"][0]["outcome"] = "RESOLVED", "succeeded"
    forged = after(failed_undo, "step", step=step, from_state="ROLLBACK_FAILED")
    refused(post, forged, 409, "illegal_transition", "step.attempts")
    step["attempts"] = []
    refused(post, forged, 409, "illegal_transition", "step.attempts")


def test_it_refuses_attempts_appended_where_no_undo_runs(
    post: Any, failed_undo: list[dict[str, Any]]
) -> None:
    step = latest(failed_undo, "step-1")
    step["state"] = "RESOLVED"
    step["attempts"].append({**step["attempts"][0], "number": 2, "outcome": "succeeded"})
    forged = after(failed_undo, "step", step=step, from_state="ROLLBACK_FAILED")
    refused(post, forged, 409, "illegal_transition", "step.attempts")


# ---------------------------------------------------------------- rewriting a completed step


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("tool_name", "wire_money"),
        ("input", {"itemId": "913"}),
        ("output", {"item": "913"}),
        ("idempotency_key", "other"),
        ("reversibility", "irreversible"),
        ("has_undo", False),
        ("requires_approval", False),
        ("position", 7),
    ],
)
def test_it_refuses_a_move_that_rewrites_a_completed_steps_identity_or_output(
    post: Any, name: str, value: Any
) -> None:
    log = paused_storebot_events("s-1", refund_approval=True, return_undo_fails=False)
    accepted = log[:10]  # ... step-2 COMPLETED -> AWAITING_APPROVAL, saga COMPENSATING
    assert post(accepted).status_code == 200
    step = latest(accepted, "step-2")
    step[name] = value
    step["state"] = "REJECTED"
    forged = after(accepted, "step", step=step, from_state="AWAITING_APPROVAL")
    message = refused(post, forged, 409, "illegal_transition", f"step.{name}")
    assert name in message


@pytest.mark.parametrize("kind", ["saga", "checkpoint"])
def test_it_refuses_saga_and_checkpoint_events_that_carry_a_step(post: Any, kind: str) -> None:
    log = storebot_events("s-1")[:3]
    assert post(log).status_code == 200
    step = latest(log, "step-1")
    step["tool_name"] = "wire_money"
    forged = after(log, kind, step=step, to_state="IN_PROGRESS", from_state="IN_PROGRESS")
    refused(post, forged, 422, "validation_error", "step")


def test_it_refuses_an_event_whose_log_names_another_step(post: Any) -> None:
    log = storebot_events("s-1")
    assert post(log[:2]).status_code == 200
    forged = copy.deepcopy(log[2])
    forged["event"]["tool_name"] = "wire_money"
    refused(post, forged, 422, "validation_error", "event.tool_name")


# ---------------------------------------------------------------- moving back, reviving


def test_it_refuses_completed_rolled_back_completed(
    post: Any, rolled_back: list[dict[str, Any]]
) -> None:
    step = latest(rolled_back, "step-1")
    step["state"] = "COMPLETED"
    forged = after(rolled_back, "step", step=step, from_state="ROLLED_BACK")
    assert "ROLLED_BACK to COMPLETED" in refused(
        post, forged, 409, "illegal_transition", "event.to_state"
    )
    sneaked = after(
        rolled_back, "attempt", step=step, from_state="ROLLED_BACK", to_state="COMPLETED"
    )
    refused(post, sneaked, 409, "illegal_transition", "step.state")


def test_it_refuses_to_revive_an_ended_saga(post: Any, rolled_back: list[dict[str, Any]]) -> None:
    revive = after(rolled_back, "checkpoint", saga={"status": "IN_PROGRESS"})
    refused(post, revive, 409, "illegal_transition", "saga.status")
    back = after(rolled_back, "saga", saga={"status": "IN_PROGRESS"}, from_state="ROLLED_BACK")
    refused(post, back, 409, "illegal_transition", "event.to_state")
    state = after(rolled_back, "checkpoint", saga={"state": {"cart": "rewritten"}})
    refused(post, state, 409, "illegal_transition", "saga.status")
    new = latest(rolled_back, "step-1")
    new.update(id="step-9", state="PENDING", position=3, attempts=[], output=None)
    refused(post, after(rolled_back, "step", step=new), 409, "illegal_transition", "saga.status")


def test_it_refuses_a_saga_whose_name_or_birth_is_rewritten(
    post: Any, rolled_back: list[dict[str, Any]]
) -> None:
    renamed = after(rolled_back, "saga", saga={"name": "harmless"}, from_state="ROLLED_BACK")
    refused(post, renamed, 409, "illegal_transition", "saga.name")
    log = storebot_events("s-2")
    assert post(log[:3]).status_code == 200
    born = after(log[:3], "checkpoint", saga={"created_at": "1970-01-01T00:00:00Z"})
    refused(post, born, 409, "illegal_transition", "saga.created_at")


def test_a_checkpoint_changes_a_running_sagas_state_and_nothing_else(post: Any) -> None:
    log = storebot_events("s-1")[:3]
    assert post(log).status_code == 200
    saved = after(log, "checkpoint", saga={"state": {"cart": ["882"]}})
    assert post([saved]).status_code == 200
    assert Saga.objects.get().state == {"cart": ["882"]}
    moved = after([*log, saved], "checkpoint", saga={"next_step_number": 9})
    refused(post, moved, 409, "illegal_transition", "saga.next_step_number")


# ---------------------------------------------------------------- creating steps


def test_it_refuses_a_step_created_already_completed(post: Any) -> None:
    log = storebot_events("s-1")
    assert post(log[:1]).status_code == 200
    born_done = copy.deepcopy(log[2])  # step-1 COMPLETED, as its first event
    born_done["event"]["from_state"] = None
    born_done["event"]["seq"] = born_done["saga"]["seq"] = 2
    refused(post, born_done, 409, "illegal_transition", "step.state")
    as_attempt = {**born_done, "event": {**born_done["event"], "kind": "attempt"}}
    refused(post, as_attempt, 422, "unknown_step", "step.id")


def test_every_kind_of_event_counts_against_the_step_limit(post: Any, settings: Any) -> None:
    settings.SAGABOARD_MAX_STEPS = 2
    log = storebot_events("s-1")[:5]  # two steps
    assert post(log).status_code == 200
    third = latest(log, "step-2")
    third.update(id="step-3", state="PENDING", position=2, output=None, completed_at=None)
    message = refused(post, after(log, "step", step=third), 422, "limit_exceeded", "step.id")
    assert "at most 2 steps (SAGABOARD_MAX_STEPS)" in message
    for kind in ("attempt", "checkpoint", "saga"):
        forged = after(log, kind, step=third, to_state="PENDING", from_state="PENDING")
        response = post([forged])
        assert 400 <= response.status_code < 500, (kind, response.content)
    assert Step.objects.count() == 2


def test_a_step_must_take_the_next_position(post: Any) -> None:
    log = storebot_events("s-1")
    assert post(log[:3]).status_code == 200
    second = copy.deepcopy(log[3])
    second["step"]["position"] = 0
    refused(post, second, 409, "illegal_transition", "step.position")


# ---------------------------------------------------------------- sagaboard_verify


def test_verify_passes_a_record_that_only_events_made(
    post: Any, failed_undo: list[dict[str, Any]]
) -> None:
    out = io.StringIO()
    call_command("sagaboard_verify", stdout=out)
    assert "1 saga(s), 13 event(s) replayed: 0 difference(s)" in out.getvalue()


def test_verify_reports_each_field_changed_behind_the_log_and_exits_non_zero(
    post: Any, failed_undo: list[dict[str, Any]]
) -> None:
    Saga.objects.update(status="ROLLED_BACK")
    Step.objects.filter(step_id="step-1").update(tool_name="wire_money", output={"x": 1})
    CompensationAttempt.objects.filter(step__step_id="step-1").update(outcome="succeeded")
    out = io.StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("sagaboard_verify", "--project", "shop", "--saga", "s-1", stdout=out)
    assert failed.value.returncode == 1
    assert "4 difference(s)" in str(failed.value)
    lines = out.getvalue().splitlines()
    assert "shop/s-1 saga.status: stored 'ROLLED_BACK', replayed 'ROLLBACK_FAILED'" in lines
    assert "shop/s-1 step-1 step.tool_name: stored 'wire_money', replayed 'return_item'" in lines
    assert any(line.startswith("shop/s-1 step-1 step.output: stored {'x': 1}") for line in lines)
    assert any(line.startswith("shop/s-1 step-1 step.compensation_attempts:") for line in lines)
    assert "'outcome': 'succeeded'" in lines[-1] and "'outcome': 'timed_out'" in lines[-1]
    # Undo the damage so that the module's own check (record_verified) passes.
    Saga.objects.update(status="ROLLBACK_FAILED")
    CompensationAttempt.objects.filter(step__step_id="step-1").update(outcome="timed_out")
    Step.objects.filter(step_id="step-1").update(tool_name="return_item", output={"rma": "RMA-882"})


def test_verify_finds_a_step_or_event_that_is_not_in_the_log(
    post: Any, rolled_back: list[dict[str, Any]]
) -> None:
    saga = Saga.objects.get()
    step = Step.objects.get(step_id="step-1")
    step.pk, step.step_id = None, "step-9"
    step.save()
    report = verify(saga_id="s-1")
    assert [(d.step, d.field) for d in report.differences] == [("step-9", "step")]
    Step.objects.filter(step_id="step-9").delete()
    Event.objects.filter(saga=saga, seq=2).update(change=None)
    report = verify(project="shop")
    assert [d.field for d in report.differences] == ["event log"]
    assert "cannot replay" in str(report.differences[0])
    Event.objects.filter(saga=saga, seq=2).update(change=json.dumps(rolled_back[1]))
    assert verify().ok and verify(project="other").sagas == 0


def test_verify_help_says_what_it_compares() -> None:
    parser = load_command_class("sagaboard", "sagaboard_verify").create_parser(
        "manage.py", "sagaboard_verify"
    )
    text = " ".join(parser.format_help().split())
    assert "--project SLUG" in text and "--saga ID" in text and "exits with status 1" in text

"""Property: whatever events a token posts, the record is the replay of the accepted ones.

Real engine runs (the SDK's events: clean and failed rollbacks, approvals, retried
undos) are posted one event at a time through the API, with forged events of every
kind drawn in between: rewritten identities and outputs, status changes carried by
checkpoints and steps, revived sagas, steps past the limit, rewritten attempts,
stale and renamed events, and some legal ones (checkpoints of the declarative state,
new steps). Every answer is 200 or a 4xx naming its rule (code) and field; the
saga's event log is exactly the events answered 200, and it replays through
undo_core to exactly the stored saga and steps (``sagaboard_verify``).
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sagaboard.access.services.tokens import token_create
from sagaboard.models import Event, Project, Saga
from sagaboard.record.services.verify import verify
from tests.support.agent_runs import Recorder, paused_storebot_events, post_events, storebot_events
from undo_core import STEP_TRANSITIONS, RetryPolicy, SagaRollbackError, StepState, define_tool
from undo_core import Saga as LocalSaga

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]

CODES = {
    "illegal_transition", "validation_error", "unknown_saga", "unknown_step", "conflict",
    "stale_event", "limit_exceeded",
}  # fmt: skip
SAGA_STATUSES = [
    "IN_PROGRESS", "COMPLETED", "FAILED", "ROLLED_BACK", "ROLLBACK_FAILED", "COMPENSATING"
]  # fmt: skip
STEP_STATES = [
    "PENDING", "COMPLETED", "FAILED", "ROLLED_BACK", "ROLLBACK_FAILED", "AWAITING_APPROVAL",
    "COMPENSATING", "REJECTED", "RESOLVED", "IN_DOUBT",
]  # fmt: skip
IDENTITY = {
    "tool_name": "wire_money", "input": {"amount": 10_000}, "idempotency_key": "forged",
    "reversibility": "irreversible", "has_undo": False, "requires_approval": True, "position": 9,
    "output": {"forged": True}, "created_at": "1970-01-01T00:00:00+00:00",
}  # fmt: skip


def retried_undo_events(saga_id: str) -> list[dict[str, Any]]:
    """An undo that fails once and succeeds on its retry: attempt events, then ROLLED_BACK."""
    store = Recorder()
    saga = LocalSaga("retry", store=store, saga_id=saga_id)
    failures = iter([True])

    def flaky(output: Any, given: Any) -> None:
        if next(failures, False):
            raise ConnectionError("try again")

    retry = RetryPolicy(max_attempts=3, initial_interval=0, jitter=0)
    saga.execute(define_tool("book", lambda i: {"booking": 1}, flaky, undo_retry=retry), {})

    def boom(given: Any) -> None:
        raise RuntimeError("no")

    with pytest.raises(SagaRollbackError):
        saga.execute(define_tool("pay", boom), {})
    return store.sent


def completed_events(saga_id: str) -> list[dict[str, Any]]:
    store = Recorder()
    with LocalSaga("done", store=store, saga_id=saga_id) as saga:
        saga.execute(define_tool("a", lambda i: 1, lambda o, i: None), {"n": 1})
        saga.execute(define_tool("b", lambda i: 2), {"n": 2})
    return store.sent


RUNS = {
    "rolled_back": storebot_events,
    "awaiting_approval": lambda sid: paused_storebot_events(
        sid, refund_approval=True, return_undo_fails=False
    ),
    "rollback_failed": lambda sid: paused_storebot_events(
        sid, refund_approval=False, return_undo_fails=True
    ),
    "retried_undo": retried_undo_events,
    "completed": completed_events,
}


@pytest.fixture(scope="module")
def runs() -> dict[str, list[dict[str, Any]]]:
    """One recorded run per kind, re-identified per example (engine runs cost time)."""
    return {name: make("template") for name, make in RUNS.items()}


def renamed(events: list[dict[str, Any]], saga_id: str) -> list[dict[str, Any]]:
    text = json.dumps(events).replace('"template', f'"{saga_id}')
    return json.loads(text)  # type: ignore[no-any-return]


class Forger:
    """Draws forged events from what the saga has accepted so far."""

    def __init__(self, data: Any, accepted: list[dict[str, Any]], saga_id: str) -> None:
        self.data, self.accepted, self.saga_id = data, accepted, saga_id

    def draw(self, strategy: Any) -> Any:
        return self.data.draw(strategy)

    def steps(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for event in self.accepted:
            if event["step"]:
                found[event["step"]["id"]] = event["step"]
        return found

    def event(
        self,
        kind: str,
        *,
        step: dict[str, Any] | None,
        saga: dict[str, Any] | None = None,
        from_state: str | None,
        to_state: str | None = None,
        seq_shift: int = 1,
    ) -> dict[str, Any]:
        last = self.accepted[-1]
        seq = max(1, last["saga"]["seq"] + seq_shift)
        record = {**copy.deepcopy(last["saga"]), "seq": seq, **(saga or {})}
        to = to_state or (step["state"] if step else record["status"])
        return {
            "event_id": f"forged-{uuid.uuid4().hex[:12]}",
            "type": "transition",
            "saga": record,
            "step": step,
            "event": {
                **last["event"], "seq": seq, "kind": kind, "from_state": from_state,
                "to_state": to, "step_id": step["id"] if step else None,
                "tool_name": step["tool_name"] if step else None,
            },
        }  # fmt: skip

    def forge(self) -> dict[str, Any]:
        steps = self.steps()
        status = self.accepted[-1]["saga"]["status"]
        choice = self.draw(st.sampled_from(FORGERIES if steps else FORGERIES[:5]))
        return choice(self, steps, status)  # type: ignore[no-any-return]


def _checkpoint_status(f: Forger, steps: Any, status: str) -> dict[str, Any]:
    new = f.draw(st.sampled_from(SAGA_STATUSES))
    return f.event("checkpoint", step=None, saga={"status": new}, from_state=status)


def _checkpoint_state(f: Forger, steps: Any, status: str) -> dict[str, Any]:
    state = f.draw(st.dictionaries(st.sampled_from(["cart", "n"]), st.integers(0, 9)))
    extra = f.draw(st.sampled_from([{}, {"next_step_number": 99}, {"failed_step": "step-1"}]))
    return f.event("checkpoint", step=None, saga={"state": state, **extra}, from_state=status)


def _saga_move(f: Forger, steps: Any, status: str) -> dict[str, Any]:
    to = f.draw(st.sampled_from(SAGA_STATUSES))
    frm = f.draw(st.sampled_from([status, status, None, "IN_PROGRESS"]))
    return f.event("saga", step=None, saga={"status": to}, from_state=frm)


def _saga_rename(f: Forger, steps: Any, status: str) -> dict[str, Any]:
    change = f.draw(
        st.sampled_from(
            [{"name": "other"}, {"created_at": "1970-01-01T00:00:00+00:00"},
             {"options": {"auto_rollback_on_failure": False}}]
        )
    )  # fmt: skip
    return f.event("checkpoint", step=None, saga=change, from_state=status)


def _stale(f: Forger, steps: Any, status: str) -> dict[str, Any]:
    return f.event("checkpoint", step=None, from_state=status, seq_shift=f.draw(st.integers(-2, 0)))


def _new_step(f: Forger, steps: Any, status: str) -> dict[str, Any]:
    template = copy.deepcopy(next(iter(steps.values())))
    state = f.draw(st.sampled_from(["PENDING", "PENDING", "COMPLETED"]))
    template.update(
        id=f"step-x{len(steps)}", state=state,
        position=f.draw(st.sampled_from([len(steps), len(steps), 0])), attempts=[], output=None,
        completed_at=None,
    )  # fmt: skip
    kind = f.draw(st.sampled_from(["step", "step", "attempt", "saga", "checkpoint"]))
    return f.event(kind, step=template, from_state=None)


def _step_move(f: Forger, steps: Any, status: str) -> dict[str, Any]:
    step = copy.deepcopy(f.draw(st.sampled_from(sorted(steps.values(), key=lambda s: s["id"]))))
    frm = step["state"]
    legal = sorted(STEP_TRANSITIONS[StepState(frm)])  # tampered moves the tables allow
    step["state"] = f.draw(st.sampled_from([*legal, *legal, *STEP_STATES]))
    if f.draw(st.booleans()):
        name = f.draw(st.sampled_from(sorted(IDENTITY)))
        step[name] = IDENTITY[name]
    if f.draw(st.booleans()):
        step["output"] = {"rewritten": True}
    saga = {"status": f.draw(st.sampled_from(SAGA_STATUSES))} if f.draw(st.booleans()) else None
    return f.event("step", step=step, saga=saga, from_state=frm)


def _attempt(f: Forger, steps: Any, status: str) -> dict[str, Any]:
    step = copy.deepcopy(f.draw(st.sampled_from(sorted(steps.values(), key=lambda s: s["id"]))))
    attempts = step["attempts"]
    how = f.draw(st.sampled_from(["append", "rewrite", "drop", "renumber", "state"]))
    added = {
        "number": len(attempts) + 1, "started_at": "2026-01-01T00:00:00+00:00",
        "finished_at": None, "outcome": "failed", "error": "x", "actor": None,
    }  # fmt: skip
    if how == "append" or not attempts:
        attempts.append(added)
    elif how == "rewrite":
        attempts[0]["outcome"] = "succeeded"
    elif how == "drop":
        attempts.pop()
    elif how == "renumber":
        attempts.append({**added, "number": attempts[-1]["number"]})
    frm = step["state"]
    if how == "state":
        step["state"] = f.draw(st.sampled_from(STEP_STATES))
    return f.event("attempt", step=step, from_state=frm)


FORGERIES = [
    _checkpoint_status, _checkpoint_state, _saga_move, _saga_rename, _stale,
    _new_step, _step_move, _attempt,
]  # fmt: skip


@pytest.fixture
def post(client: Client) -> Any:
    project = Project.objects.get_or_create(slug="prop", name="Prop")[0]
    secret = token_create(project=project, label="property").secret

    def post(event: dict[str, Any]) -> Any:
        return post_events(client, secret, [event])

    return post


def renumbered(event: dict[str, Any], accepted: list[dict[str, Any]]) -> dict[str, Any]:
    """The engine's next event, after the forged events that were accepted."""
    event = copy.deepcopy(event)
    seq = accepted[-1]["saga"]["seq"] + 1 if accepted else event["saga"]["seq"]
    event["saga"]["seq"] = event["event"]["seq"] = seq
    event["event_id"] = f"{event['saga']['id']}:{seq}:{uuid.uuid4().hex[:6]}"
    return event


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@pytest.mark.slow  # property-based: many generated runs
@given(data=st.data(), run=st.sampled_from(sorted(RUNS)))
def test_the_stored_record_is_always_the_replay_of_the_accepted_events(
    post: Any, runs: dict[str, list[dict[str, Any]]], settings: Any, data: Any, run: str
) -> None:
    settings.SAGABOARD_MAX_STEPS = 4
    saga_id = f"p-{uuid.uuid4().hex[:10]}"
    accepted: list[dict[str, Any]] = []
    refusals: list[tuple[str, str]] = []
    for genuine in renamed(runs[run], saga_id):
        forged = []
        if accepted:
            forger = Forger(data, accepted, saga_id)
            forged = [forger.forge() for _ in range(data.draw(st.integers(0, 2)))]
        for event in [*forged, renumbered(genuine, accepted)]:
            response = post(event)
            if response.status_code == 200:
                accepted.append(event)
                continue
            assert 400 <= response.status_code < 500, response.content
            error = response.json()["error"]
            assert error["code"] in CODES and error["field"], error
            assert error["message"], error
            refusals.append((error["code"], error["field"]))
    saga = Saga.objects.get(saga_id=saga_id)
    logged = [
        json.loads(change)
        for change in Event.objects.filter(saga=saga, seq__isnull=False)
        .order_by("seq")
        .values_list("change", flat=True)
    ]
    assert logged == accepted, "the event log is not exactly the accepted events"
    report = verify(saga_id=saga_id)
    assert report.ok, [str(d) for d in report.differences]
    assert report.events == len(accepted)

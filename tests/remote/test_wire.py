"""The event JSON of docs/api.md, field by field, and reading a saga back."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from undo_core import (
    AttemptOutcome,
    CompensationAttempt,
    EventKind,
    SagaChange,
    SagaEvent,
    SagaRecord,
    SagaStatus,
    SerializationError,
    StepSnapshot,
    StepState,
)
from undo_core.remote import change_to_event
from undo_core.remote._wire import encode_event, saga_from_json

AT = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
SAGA_KEYS = {
    "id", "name", "status", "created_at", "updated_at", "seq",
    "next_step_number", "options", "state", "failed_step",
}  # fmt: skip
STEP_KEYS = {
    "id", "position", "tool_name", "state", "input", "output", "error", "error_type",
    "traceback", "has_undo", "requires_approval", "reversibility", "idempotency_key",
    "created_at", "updated_at", "completed_at", "attempts", "decision_note", "decided_by",
    "metadata",
}  # fmt: skip
EVENT_KEYS = {
    "seq", "kind", "step_id", "tool_name", "from_state", "to_state", "at", "actor", "detail"
}  # fmt: skip


def a_change(*, input: object = None, created: datetime = AT) -> SagaChange:
    record = SagaRecord(
        "s-1",
        "storebot-return",
        SagaStatus.COMPENSATING,
        created,
        AT + timedelta(seconds=3),
        seq=9,
        next_step_number=3,
        options={"on_compensation_failure": "continue"},
        lease_owner="host:1:abcd",
        lease_expires_at=AT,
    )
    attempt = CompensationAttempt(1, AT, AT, AttemptOutcome.FAILED, "card API down", "ops")
    step = StepSnapshot(
        "step-2",
        1,
        "refund_payment",
        StepState.COMPENSATING,
        input if input is not None else {"chargeId": "ch_123"},
        output={"id": "re_1"},
        idempotency_key="s-1:step-2",
        created_at=AT,
        updated_at=AT,
        completed_at=AT,
        compensation_attempts=(attempt,),
    )
    event = SagaEvent(
        "s-1",
        "storebot-return",
        9,
        EventKind.ATTEMPT,
        StepState.COMPENSATING,
        StepState.COMPENSATING,
        AT + timedelta(seconds=3),
        "step-2",
        "refund_payment",
        "ops",
        "card API down",
    )
    return SagaChange(record, step, event)


def test_an_event_has_exactly_the_documented_fields() -> None:
    event = change_to_event(a_change())
    assert set(event) == {"event_id", "type", "saga", "step", "event"}
    assert event["event_id"] == "s-1:9" and event["type"] == "transition"
    assert set(event["saga"]) == SAGA_KEYS
    assert set(event["step"]) == STEP_KEYS
    assert set(event["event"]) == EVENT_KEYS
    assert event["step"]["attempts"] == [
        {
            "number": 1,
            "started_at": "2026-11-29T20:00:00+00:00",
            "finished_at": "2026-11-29T20:00:00+00:00",
            "outcome": "failed",
            "error": "card API down",
            "actor": "ops",
        }
    ]
    assert event["event"]["at"] == "2026-11-29T20:00:03+00:00"


def test_enums_are_plain_strings_and_a_saga_event_has_no_step() -> None:
    change = a_change()
    event = change_to_event(change)
    for value in (
        event["saga"]["status"],
        event["step"]["state"],
        event["event"]["kind"],
        event["event"]["to_state"],
    ):
        assert type(value) is str
    assert event["event"]["kind"] == "attempt" and event["saga"]["status"] == "COMPENSATING"
    saga_only = change_to_event(change._replace(step=None))
    assert saga_only["step"] is None


def test_times_are_utc_with_an_offset_even_when_naive_or_elsewhere() -> None:
    paris = timezone(timedelta(hours=1))
    event = change_to_event(a_change(created=datetime(2026, 11, 29, 21, 0, tzinfo=paris)))
    assert event["saga"]["created_at"] == "2026-11-29T20:00:00+00:00"
    naive = change_to_event(a_change(created=datetime(2026, 11, 29, 20, 0)))
    assert naive["saga"]["created_at"] == "2026-11-29T20:00:00+00:00"


def test_encoding_names_the_step_and_value_that_are_not_json() -> None:
    with pytest.raises(SerializationError) as caught:
        encode_event(a_change(input={"when": {1, 2}}))
    message = str(caught.value)
    assert message.startswith("input of step 'step-2' (refund_payment) of saga 'storebot-return'")
    assert "input['when'] is of type set, which is not JSON" in message
    assert (caught.value.saga_id, caught.value.step_id, caught.value.field) == (
        change_to_event(a_change())["saga"]["id"],
        "step-2",
        "input",
    )
    with pytest.raises(SerializationError, match="state of saga 'storebot-return'"):
        change = a_change()
        encode_event(change._replace(saga=change.saga._replace(state=float("nan"))))


def test_a_saga_reads_back_from_its_json() -> None:
    change = a_change()
    event = json.loads(encode_event(change))
    snapshot = saga_from_json({**event["saga"], "steps": [event["step"]]})
    assert snapshot.record == change.saga._replace(lease_owner=None, lease_expires_at=None)
    assert snapshot.steps == (change.step,)

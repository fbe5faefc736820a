"""undo_core.stores.record_json: the records' one JSON form, shared by the wire, SQLite and MCP."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from undo_core import (
    AttemptOutcome,
    CompensationAttempt,
    EventKind,
    SagaChange,
    SagaEvent,
    SagaRecord,
    SagaStatus,
    SQLiteStore,
    StepSnapshot,
    StepState,
)
from undo_core.mcp.backends import _local_step, _remote_step
from undo_core.remote import change_to_event
from undo_core.stores.record_json import JSON_NAMES, record_from_json, record_json
from undo_core.stores.rules import MOVABLE

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _attempt(number: int) -> CompensationAttempt:
    return CompensationAttempt(
        number=number,
        started_at=T0 + timedelta(seconds=number),
        finished_at=T0 + timedelta(seconds=number, milliseconds=300),
        outcome=AttemptOutcome.FAILED,
        error="HTTP 503",
        actor="worker-1",
    )


def _step(**changes: object) -> StepSnapshot:
    step = StepSnapshot(
        id="step-1",
        position=0,
        tool_name="refund",
        state=StepState.ROLLBACK_FAILED,
        input={"orderId": "o-17", "amount": 12.5},
        output={"refund": {"id": "r-1"}},
        error="HTTP 503",
        error_type="HTTPError",
        traceback="Traceback...",
        has_undo=True,
        requires_approval=True,
        reversibility="compensable",
        idempotency_key="k-1",
        created_at=T0,
        updated_at=T0 + timedelta(seconds=5),
        completed_at=T0 + timedelta(seconds=1),
        compensation_attempts=(_attempt(1), _attempt(2)),
        decision_note="looked at it",
        decided_by="ana",
        metadata={"trace": "abc"},
    )
    return step._replace(**changes)


def _saga(**changes: object) -> SagaRecord:
    record = SagaRecord(
        id="s-1",
        name="checkout",
        status=SagaStatus.COMPENSATING,
        created_at=T0,
        updated_at=T0 + timedelta(seconds=5),
        seq=4,
        next_step_number=2,
        options={"auto_rollback": True},
        state={"cart": [1, 2]},
        failed_step="step-2",
        lease_owner="host:1",
        lease_expires_at=T0 + timedelta(minutes=1),
    )
    return record._replace(**changes)


@pytest.mark.parametrize("record", [_saga(), _step(), _attempt(1)], ids=type)
def test_every_field_of_a_record_has_a_key_and_survives_json_text(record: tuple) -> None:
    data = json.loads(json.dumps(record_json(record)))
    assert set(data) == {JSON_NAMES.get(name, name) for name in record._fields}
    assert record_from_json(type(record), data) == record


def test_enums_become_their_values_and_times_utc_text() -> None:
    data = record_json(_step())
    assert type(data["state"]) is str and data["state"] == "ROLLBACK_FAILED"
    assert data["attempts"][0]["outcome"] == "failed"
    assert data["created_at"] == "2026-03-01T12:00:00+00:00"
    naive = record_json(_step(created_at=datetime(2026, 3, 1, 12, 0)))
    assert naive["created_at"] == "2026-03-01T12:00:00+00:00"  # naive is taken as UTC


def test_reading_back_gives_the_annotated_types() -> None:
    back = record_from_json(StepSnapshot, record_json(_step()))
    assert back.state is StepState.ROLLBACK_FAILED
    assert back.compensation_attempts[1].outcome is AttemptOutcome.FAILED
    assert back.created_at == T0 and back.created_at.tzinfo is not None


def test_a_missing_key_keeps_the_default_and_a_missing_required_one_is_named() -> None:
    back = record_from_json(
        StepSnapshot, {"id": "a", "position": 0, "tool_name": "t", "state": "PENDING", "input": 1}
    )
    assert back.metadata == {} and back.has_undo is True and back.compensation_attempts == ()
    with pytest.raises(KeyError, match="tool_name"):
        record_from_json(StepSnapshot, {"id": "a", "position": 0, "state": "PENDING", "input": 1})
    assert record_from_json(StepSnapshot, {**record_json(_step()), "metadata": None}).metadata == {}


def test_the_wire_event_sends_the_records_json_without_the_lease() -> None:
    event = SagaEvent("s-1", "checkout", 4, EventKind.STEP, "ROLLBACK_FAILED", "COMPENSATING", T0)
    sent = change_to_event(SagaChange(_saga(), _step(), event))
    assert sent["step"] == record_json(_step())
    assert sent["saga"] == record_json(_saga(), skip=("lease_owner", "lease_expires_at"))
    assert "saga_id" not in sent["event"] and sent["event"]["at"] == "2026-03-01T12:00:00+00:00"


def test_the_sqlite_journal_keeps_each_field_a_step_move_may_change(tmp_path: Path) -> None:
    """A later move's journal row carries what the rules let a move change, metadata too."""
    created = _step(state=StepState.PENDING, output=None, compensation_attempts=(), metadata={})
    moved = _step(state=StepState.COMPLETED, compensation_attempts=(), metadata={"trace": "xyz"})
    saga = _saga(status=SagaStatus.IN_PROGRESS, lease_owner=None, lease_expires_at=None)
    with SQLiteStore(tmp_path / "s.db") as store:
        store.apply(SagaChange(saga._replace(seq=1), None, _event(1, EventKind.SAGA, None)))
        store.apply(SagaChange(saga._replace(seq=2), created, _event(2, EventKind.STEP, None)))
        store.apply(SagaChange(saga._replace(seq=3), moved, _event(3, EventKind.STEP, "PENDING")))
        loaded = store.load("s-1")
        rows = store._db.execute("SELECT step FROM undo_journal WHERE seq = 3").fetchone()
    assert loaded is not None and loaded.steps == (moved,)
    written = set(json.loads(rows[0]))
    assert written == {*MOVABLE, "attempts"}  # nothing fixed at creation is written again


def _event(seq: int, kind: EventKind, from_state: str | None) -> SagaEvent:
    to_state = "IN_PROGRESS" if kind is EventKind.SAGA else ("PENDING", "COMPLETED")[seq - 2]
    step_id = None if kind is EventKind.SAGA else "step-1"
    return SagaEvent("s-1", "checkout", seq, kind, to_state, from_state, T0, step_id, "refund")


def test_both_mcp_modes_answer_a_step_with_the_same_keys() -> None:
    """The standalone reply (from a record) and the connected one (from the API) agree."""
    step = _step()
    local = _local_step(step, full=True)
    connected = _remote_step(record_json(step), "COMPENSATING", full=True)
    assert set(connected) - set(local) == {"where", "undoRunner"}
    assert {k: connected[k] for k in local} == local
    assert local["undoAttempts"][0] == {
        "number": 1,
        "startedAt": "2026-03-01T12:00:01+00:00",
        "finishedAt": "2026-03-01T12:00:01.300000+00:00",
        "outcome": "failed",
        "error": "HTTP 503",
        "actor": "worker-1",
    }


def test_the_connected_mcp_reply_says_who_runs_a_waiting_undo_as_sagaboard_says() -> None:
    """``undo_runner`` is sagaboard's one answer: an agent's undo is never "waiting for its
    undo" (no worker will run it), and a step with no undo has nothing to undo."""
    said = {
        runner: _remote_step(
            {"id": "step-1", "state": "COMPLETED", "has_undo": runner != "nothing",
             "undo_runner": runner}, "ROLLBACK_FAILED",
        )["where"]
        for runner in ("sagaboard", "agent", "nothing")
    }  # fmt: skip
    assert said["sagaboard"].startswith("waiting for its undo")
    assert said["agent"].startswith("its undo lives in the agent's process")
    assert "force-resolves" in said["agent"]
    assert said["nothing"].startswith("done, no undo: nothing to undo")

"""The wire format of docs/api.md: one engine ``SagaChange`` <-> one transition event.

Kept apart from the transport so the server side and tests can check the
shape without a network, and so the rules (times in UTC ISO 8601, enums as
their string values, attempts as objects) live in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..records import (
    AttemptOutcome,
    CompensationAttempt,
    SagaEvent,
    SagaRecord,
    SagaSnapshot,
    StepSnapshot,
)
from ..serialize import check_counters, json_text, unstorable
from ..states import SagaStatus, StepState
from ..storage import SagaChange

__all__ = [
    "change_to_event",
    "encode_event",
    "event_id",
    "saga_from_json",
    "step_from_json",
]


def _ts(value: datetime | None) -> str | None:
    """ISO 8601 in UTC; a naive time is taken to be UTC already (the engine's clock is UTC)."""
    if value is None:
        return None
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return aware.isoformat()


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _str(value: object | None) -> str | None:
    """An enum (StrEnum) or string as its plain string value."""
    return None if value is None else str(value)


def event_id(change: SagaChange) -> str:
    """``"<saga id>:<seq>"``: unique per transition, so a resend is recognised as a duplicate."""
    return f"{change.saga.id}:{change.event.seq}"


def _saga_dict(r: SagaRecord) -> dict[str, Any]:
    return {
        "id": r.id,
        "name": r.name,
        "status": _str(r.status),
        "created_at": _ts(r.created_at),
        "updated_at": _ts(r.updated_at),
        "seq": r.seq,
        "next_step_number": r.next_step_number,
        "options": dict(r.options),
        "state": r.state,
        "failed_step": r.failed_step,
    }


def _attempt_dict(a: CompensationAttempt) -> dict[str, Any]:
    return {
        "number": a.number,
        "started_at": _ts(a.started_at),
        "finished_at": _ts(a.finished_at),
        "outcome": _str(a.outcome),
        "error": a.error,
        "actor": a.actor,
    }


def _step_dict(s: StepSnapshot) -> dict[str, Any]:
    return {
        "id": s.id,
        "position": s.position,
        "tool_name": s.tool_name,
        "state": _str(s.state),
        "input": s.input,
        "output": s.output,
        "error": s.error,
        "error_type": s.error_type,
        "traceback": s.traceback,
        "has_undo": s.has_undo,
        "requires_approval": s.requires_approval,
        "reversibility": _str(s.reversibility),
        "idempotency_key": s.idempotency_key,
        "created_at": _ts(s.created_at),
        "updated_at": _ts(s.updated_at),
        "completed_at": _ts(s.completed_at),
        "attempts": [_attempt_dict(a) for a in s.compensation_attempts],
        "decision_note": s.decision_note,
        "decided_by": s.decided_by,
        "metadata": dict(s.metadata),
    }


def _event_dict(e: SagaEvent) -> dict[str, Any]:
    return {
        "seq": e.seq,
        "kind": _str(e.kind),
        "step_id": e.step_id,
        "tool_name": e.tool_name,
        "from_state": _str(e.from_state),
        "to_state": _str(e.to_state),
        "at": _ts(e.at),
        "actor": e.actor,
        "detail": e.detail,
    }


def change_to_event(change: SagaChange) -> dict[str, Any]:
    """The ``POST /api/v1/events`` event for one transition (values not yet JSON-checked)."""
    return {
        "event_id": event_id(change),
        "type": "transition",
        "saga": _saga_dict(change.saga),
        "step": _step_dict(change.step) if change.step is not None else None,
        "event": _event_dict(change.event),
    }


def encode_event(change: SagaChange) -> str:
    """The event as compact JSON text, or :class:`SerializationError` naming the bad value.

    Called by ``SagaboardStore.apply`` in the caller's thread, so a value that
    cannot be sent fails that transition there and then (the engine fails the
    step) instead of failing later in the background where nobody can act.
    The rule is undo_core's one rule for every store (``undo_core.serialize``):
    JSON, text that encodes as UTF-8, counters within 64 bits. Encoding now
    also freezes the values: a caller mutating its input later does not change
    what is sent.
    """
    try:
        text = json_text(change_to_event(change))
        check_counters(change)
    except (TypeError, ValueError, OverflowError) as err:
        raise unstorable(change, err) from err
    return text


# ---------------------------------------------------------------- reading back


def _attempt(a: Mapping[str, Any]) -> CompensationAttempt:
    return CompensationAttempt(
        number=a["number"],
        started_at=_dt(a.get("started_at")) or datetime.min.replace(tzinfo=UTC),
        finished_at=_dt(a.get("finished_at")),
        outcome=AttemptOutcome(a["outcome"]) if a.get("outcome") else None,
        error=a.get("error"),
        actor=a.get("actor"),
    )


def step_from_json(data: Mapping[str, Any]) -> StepSnapshot:
    """One ``<step>`` object of the API as the engine's snapshot."""
    return StepSnapshot(
        id=data["id"],
        position=data["position"],
        tool_name=data["tool_name"],
        state=StepState(data["state"]),
        input=data.get("input"),
        output=data.get("output"),
        error=data.get("error"),
        error_type=data.get("error_type"),
        traceback=data.get("traceback"),
        has_undo=data.get("has_undo", True),
        requires_approval=data.get("requires_approval", False),
        reversibility=data.get("reversibility", "reversible"),
        idempotency_key=data.get("idempotency_key", ""),
        created_at=_dt(data.get("created_at")),
        updated_at=_dt(data.get("updated_at")),
        completed_at=_dt(data.get("completed_at")),
        compensation_attempts=tuple(_attempt(a) for a in data.get("attempts") or ()),
        decision_note=data.get("decision_note"),
        decided_by=data.get("decided_by"),
        metadata=data.get("metadata") or {},
    )


def saga_from_json(data: Mapping[str, Any]) -> SagaSnapshot:
    """The ``GET /api/v1/sagas/{id}`` answer as a snapshot (no lease: the server keeps none)."""
    created = _dt(data["created_at"]) or datetime.min.replace(tzinfo=UTC)
    record = SagaRecord(
        id=data["id"],
        name=data["name"],
        status=SagaStatus(data["status"]),
        created_at=created,
        updated_at=_dt(data.get("updated_at")) or created,
        seq=data.get("seq", 0),
        next_step_number=data.get("next_step_number", 1),
        options=data.get("options") or {},
        state=data.get("state"),
        failed_step=data.get("failed_step"),
    )
    steps = sorted((step_from_json(s) for s in data.get("steps") or ()), key=lambda s: s.position)
    return SagaSnapshot(record=record, steps=tuple(steps))

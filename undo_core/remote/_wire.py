"""The wire format of docs/api.md: one engine ``SagaChange`` <-> one transition event.

Kept apart from the transport so the server side and tests can check the
shape without a network, and so the rules (times in UTC ISO 8601, enums as
their string values, attempts as objects) live in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..stores.record_json import record_from_json, record_json
from ..stores.serialize import check_counters, json_text, unstorable
from ..stores.storage import SagaChange
from ..vocabulary.records import SagaRecord, SagaSnapshot, StepSnapshot

__all__ = [
    "change_to_event",
    "encode_event",
    "event_id",
    "saga_from_json",
    "step_from_json",
]


def event_id(change: SagaChange) -> str:
    """``"<saga id>:<seq>"``: unique per transition, so a resend is recognised as a duplicate."""
    return f"{change.saga.id}:{change.event.seq}"


_NOT_SENT_SAGA = ("lease_owner", "lease_expires_at")
"""The lease is this process's own: the server keeps none."""
_NOT_SENT_EVENT = ("saga_id", "saga_name")
"""Carried by the event's saga object already."""


def change_to_event(change: SagaChange) -> dict[str, Any]:
    """The ``POST /api/v1/events`` event for one transition (values not yet JSON-checked)."""
    return {
        "event_id": event_id(change),
        "type": "transition",
        "saga": record_json(change.saga, skip=_NOT_SENT_SAGA),
        "step": record_json(change.step) if change.step is not None else None,
        "event": record_json(change.event, skip=_NOT_SENT_EVENT),
    }


def encode_event(change: SagaChange) -> str:
    """The event as compact JSON text, or :class:`SerializationError` naming the bad value.

    Called by ``SagaboardStore.apply`` in the caller's thread, so a value that
    cannot be sent fails that transition there and then (the engine fails the
    step) instead of failing later in the background where nobody can act.
    The rule is undo_core's one rule for every store (``undo_core.stores.serialize``):
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


def step_from_json(data: Mapping[str, Any]) -> StepSnapshot:
    """One ``<step>`` object of the API as the engine's snapshot."""
    return record_from_json(StepSnapshot, data)


def saga_from_json(data: Mapping[str, Any]) -> SagaSnapshot:
    """The ``GET /api/v1/sagas/{id}`` answer as a snapshot (no lease: the server keeps none)."""
    updated = data.get("updated_at") or data["created_at"]
    record = record_from_json(SagaRecord, {**data, "updated_at": updated})
    steps = sorted((step_from_json(s) for s in data.get("steps") or ()), key=lambda s: s.position)
    return SagaSnapshot(record=record, steps=tuple(steps))

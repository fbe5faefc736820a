"""The engine's private, mutable view of one step, and how it becomes a snapshot."""

from __future__ import annotations

import operator
import traceback as tb
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..stores.serialize import safe_text
from ..vocabulary.records import CompensationAttempt, StepSnapshot
from ..vocabulary.states import StepState
from ..vocabulary.tools import Tool

__all__ = ["StepRow", "describe", "snapshot_values"]

# The snapshot's fields read from the row by name: a row has an attribute for each.
snapshot_values = operator.attrgetter(*StepSnapshot._fields)


@dataclass(slots=True)
class StepRow:
    """One step as the engine holds it; :meth:`snapshot` is its immutable, shareable view."""

    id: str
    position: int
    tool_name: str
    tool: Tool | None
    input: Any
    state: StepState
    created_at: datetime
    updated_at: datetime
    has_undo: bool
    requires_approval: bool
    reversibility: str
    idempotency_key: str
    output: Any = None
    error: str | None = None
    error_type: str | None = None
    traceback: str | None = None
    completed_at: datetime | None = None
    compensation_attempts: tuple[CompensationAttempt, ...] = ()
    decision_note: str | None = None
    decided_by: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    unpersisted: bool = False
    """A write of this step failed after its tool ran: later writes are best effort."""
    last: StepSnapshot | None = None
    """The snapshot its last change wrote (the "before" of its next change), if any."""

    def snapshot(self) -> StepSnapshot:
        """The row as a :class:`StepSnapshot`, each field taken from the attribute of its name.

        Built straight from the attribute values (no keyword call): the engine takes
        one per transition, on its hot path.
        """
        return tuple.__new__(StepSnapshot, snapshot_values(self))

    @classmethod
    def restore(cls, snap: StepSnapshot, tool: Tool | None) -> StepRow:
        return cls(
            id=snap.id,
            position=snap.position,
            tool_name=snap.tool_name,
            tool=tool,
            input=snap.input,
            state=snap.state,
            created_at=snap.created_at or snap.updated_at or datetime.min,
            updated_at=snap.updated_at or snap.created_at or datetime.min,
            has_undo=snap.has_undo,
            requires_approval=snap.requires_approval,
            reversibility=snap.reversibility,
            idempotency_key=snap.idempotency_key,
            output=snap.output,
            error=snap.error,
            error_type=snap.error_type,
            traceback=snap.traceback,
            completed_at=snap.completed_at,
            compensation_attempts=snap.compensation_attempts,
            decision_note=snap.decision_note,
            decided_by=snap.decided_by,
            metadata=dict(snap.metadata),
        )


def describe(error: BaseException | str) -> tuple[str, str | None, str | None]:
    """(message, type name, traceback text) of an error or a plain message.

    The texts are made storable (:func:`~undo_core.stores.serialize.safe_text`): a failure
    whose message names a file that is not UTF-8 must still be recorded as a failure.
    """
    if isinstance(error, BaseException):
        trace = "".join(tb.format_exception(error)) if error.__traceback__ else None
        message = str(error) or type(error).__name__
        return safe_text(message), type(error).__name__, safe_text(trace) if trace else None
    return safe_text(str(error)), None, None

"""Immutable snapshots of sagas, steps, attempts and events.

These are what ``saga.steps`` returns, what listeners receive and what a
:class:`~undo_core.storage.SagaStore` persists. They are frozen: a snapshot
never changes after it is taken (the input/output values it carries are the
caller's own objects and are not copied).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from .states import SagaStatus, StepState

__all__ = [
    "AttemptOutcome",
    "CompensationAttempt",
    "EventKind",
    "SagaEvent",
    "SagaRecord",
    "SagaSnapshot",
    "StepSnapshot",
]


class AttemptOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"
    """The process died during the attempt (found by recovery)."""


@dataclass(frozen=True, slots=True)
class CompensationAttempt:
    """One run of a step's undo."""

    number: int
    started_at: datetime
    finished_at: datetime | None = None
    outcome: AttemptOutcome | None = None
    error: str | None = None
    actor: str | None = None


@dataclass(frozen=True, slots=True)
class StepSnapshot:
    """One step as it stood at one moment."""

    id: str
    index: int
    tool_name: str
    state: StepState
    input: Any
    output: Any = None
    error: str | None = None
    error_type: str | None = None
    traceback: str | None = None
    has_undo: bool = True
    requires_approval: bool = False
    reversibility: str = "reversible"
    idempotency_key: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    completed_at: datetime | None = None
    compensation_attempts: tuple[CompensationAttempt, ...] = ()
    decision_note: str | None = None
    """Why an approver rejected the undo, or how a human resolved the step."""
    decided_by: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def tool(self) -> str:
        """Alias of ``tool_name`` (agent-undo's ``toolName``)."""
        return self.tool_name


@dataclass(frozen=True, slots=True)
class SagaRecord:
    """A saga's own row: everything but its steps."""

    id: str
    name: str
    status: SagaStatus
    created_at: datetime
    updated_at: datetime
    seq: int = 0
    """Sequence number of the last event emitted for this saga."""
    next_step_number: int = 1
    options: dict[str, Any] = field(default_factory=dict)
    """How the saga runs: on_compensation_failure, auto_rollback, kind, definition."""
    state: Any = None
    """The declarative saga's shared state at its last checkpoint."""
    failed_step: str | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SagaSnapshot:
    """A saga with its steps, as a store returns it."""

    record: SagaRecord
    steps: tuple[StepSnapshot, ...]

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def status(self) -> SagaStatus:
        return self.record.status


class EventKind(StrEnum):
    SAGA = "saga"
    """The saga's status changed."""
    STEP = "step"
    """A step's state changed (or a step was added: from_state is None)."""
    ATTEMPT = "attempt"
    """An undo attempt ended without changing the step's state (it will retry)."""
    CHECKPOINT = "checkpoint"
    """A declarative saga saved its shared state."""


@dataclass(frozen=True, slots=True)
class SagaEvent:
    """A transition, as sent to listeners and stores: the seam for the SDK and dashboard."""

    saga_id: str
    saga_name: str
    seq: int
    kind: EventKind
    to_state: str
    from_state: str | None
    at: datetime
    step_id: str | None = None
    tool_name: str | None = None
    actor: str | None = None
    detail: str | None = None

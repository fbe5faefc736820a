"""Immutable snapshots of sagas, steps, attempts and events.

These are what ``saga.steps`` returns, what listeners receive and what a
:class:`~undo_core.stores.storage.SagaStore` persists. They are frozen: a snapshot
never changes after it is taken (the input/output values it carries are the
caller's own objects and are not copied).

They are ``NamedTuple`` s rather than frozen dataclasses because the engine
makes several per transition: a frozen dataclass costs 5 us to build, a named
tuple under 1 us (see ``benchmarks/engine.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

from .states import SagaStatus, StepState

__all__ = [
    "AttemptOutcome",
    "CompensationAttempt",
    "EventKind",
    "SagaEvent",
    "SagaKind",
    "SagaRecord",
    "SagaSnapshot",
    "StepSnapshot",
    "UndoKind",
]


class AttemptOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"
    """The process died during the attempt (found by recovery)."""


class UndoKind(StrEnum):
    """How a stored step's undo is described to a server (the ``undo`` of a step's record).

    The one list of undo kinds: the SDK sends them, sagaboard's schema accepts them and its
    workers run the three that name what to run (handler, webhook, command).
    """

    NONE = "none"
    """Nothing names the undo (none, or one that runs only in the engine's own process)."""
    CLIENT = "client"
    """The undo lives in the agent's process: only the agent can run it."""
    HANDLER = "handler"
    """A compensation registered on the server by name."""
    WEBHOOK = "webhook"
    """A POST of the step's input and output to a URL."""
    COMMAND = "command"
    """A shell command (off unless the server allows command undos)."""


_EMPTY: Mapping[str, Any] = MappingProxyType({})


class CompensationAttempt(NamedTuple):
    """One run of a step's undo."""

    number: int
    started_at: datetime
    finished_at: datetime | None = None
    outcome: AttemptOutcome | None = None
    error: str | None = None
    actor: str | None = None


class StepSnapshot(NamedTuple):
    """One step as it stood at one moment."""

    id: str
    position: int
    """0 for the saga's first step, 1 for the second..."""
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
    metadata: Mapping[str, Any] = _EMPTY

    @property
    def tool(self) -> str:
        """Alias of ``tool_name`` (agent-undo's ``toolName``)."""
        return self.tool_name


class SagaKind(StrEnum):
    """How a saga runs (``SagaRecord.options["kind"]``): recovery treats the two apart."""

    IMPERATIVE = "imperative"
    """Steps run one by one by the caller; recovery rolls back a saga whose owner is gone."""
    DECLARATIVE = "declarative"
    """A definition runs it; its ``resume()`` goes on after a crash (engine.declarative)."""


class SagaRecord(NamedTuple):
    """A saga's own row: everything but its steps."""

    id: str
    name: str
    status: SagaStatus
    created_at: datetime
    updated_at: datetime
    seq: int = 0
    """Sequence number of the last event emitted for this saga."""
    next_step_number: int = 1
    options: Mapping[str, Any] = _EMPTY
    """How the saga runs: on_compensation_failure, auto_rollback, kind, definition."""
    state: Any = None
    """The declarative saga's shared state at its last checkpoint."""
    failed_step: str | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None


class SagaSnapshot(NamedTuple):
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


class SagaEvent(NamedTuple):
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

"""API schemas (django-ninja / pydantic). Unknown fields are rejected, not ignored.

The events agents post are ``sagaboard.api.event_schema``'s (ingestion reads them too);
the answers and the manual-flow bodies are here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from sagaboard.api.event_schema import (
    EventId,
    Name,
    SagaId,
    StrictSchema,
    ToolName,
    free_text,
    identifier,
)
from sagaboard.infra.http.limits import JsonObject, JsonValue
from undo_core import (
    AttemptOutcome,
    EventKind,
    ExceptionKind,
    RollbackOutcome,
    SagaStatus,
    StepState,
    UndoKind,
    WaitingFor,
)

Actor = free_text(200)
"""Who did something, as the client names them (free text)."""


class UndoIn(StrictSchema):
    """How a step's undo runs: ``none`` (the default: nothing to undo), ``client`` (the
    agent undoes it itself), or in sagaboard: ``handler``, ``webhook``, ``command``."""

    kind: UndoKind = UndoKind.NONE
    handler: identifier(200) | None = None  # type: ignore[valid-type]
    args: JsonObject = Field(default_factory=dict)
    url: free_text(2000) | None = None  # type: ignore[valid-type]
    command: free_text(10_000) | None = None  # type: ignore[valid-type]


class SagaBeginIn(StrictSchema):
    event_id: EventId
    id: SagaId | None = None
    name: Name
    on_compensation_failure: Literal["continue", "halt"] = "halt"
    actor: Actor | None = None  # type: ignore[valid-type]


class StepAddIn(StrictSchema):
    event_id: EventId
    tool_name: ToolName
    input: JsonValue = None
    undo: UndoIn = Field(default_factory=UndoIn)
    requires_approval: bool = Field(default=False, strict=True)
    reversibility: Literal["reversible", "partial", "irreversible"] = "reversible"
    traceparent: str | None = Field(
        default=None,
        max_length=55,
        pattern=r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
        description="The W3C traceparent of the agent's span for this step (the SDK sends "
        "it with OpenTelemetry on): kept in the step's metadata, shown as 'open trace', "
        "and the parent of the worker's undo spans.",
    )


class StepCompleteIn(StrictSchema):
    event_id: EventId
    output: JsonValue = None


class StepFailIn(StrictSchema):
    event_id: EventId
    error: free_text(100_000, min_length=1)  # type: ignore[valid-type]


class SagaActionIn(StrictSchema):
    event_id: EventId
    reason: free_text(10_000) | None = None  # type: ignore[valid-type]
    actor: Actor | None = None  # type: ignore[valid-type]


_AS_REPORTED = (
    "As the agent (or engine) reported it: shown, never trusted; the server's own times are "
    "received_at and changed_at."
)


class Out(BaseModel):
    """Responses: plain pydantic too; reads attributes of ORM rows where given them."""

    model_config = ConfigDict(from_attributes=True)


class EventResultOut(Out):
    event_id: str
    status: Literal["applied", "duplicate"]
    log_id: int


class RollbackRequestOut(Out):
    """An operator's request to roll back a running saga: the SDK's engine does it."""

    saga_id: str
    by: str
    reason: str
    at: datetime | None


class EventBatchOut(Out):
    results: list[EventResultOut]
    rollback_requested: list[RollbackRequestOut] | None = None
    """Present when operators asked for the rollback of sagas of this batch."""


class RollbackRequestsOut(Out):
    rollback_requested: list[RollbackRequestOut]


class ErrorBody(Out):
    code: str
    message: str
    field: str | None = None
    index: int | None = None
    event_id: str | None = None


class ErrorOut(Out):
    error: ErrorBody


OperatorKind = Annotated[
    str,
    Field(
        # Documented, not enforced on the way out: an answer never fails on a new action.
        json_schema_extra={"pattern": r"^[a-z_]+(\.[a-z_]+)+$"},
        description="An operator's or the server's action on the record, as in the audit "
        "log: approval.requested, step.retry, undo.refused...",
    ),
]


class EventOut(Out):
    log_id: int
    event_id: str
    seq: int | None
    """None for an operator's event (a decision, an action): it has no engine sequence."""
    kind: EventKind | OperatorKind
    step_id: str | None
    tool_name: str | None
    from_state: str | None
    to_state: str
    at: datetime = Field(description="When it happened, as the agent (or engine) reported it.")
    recorded_at: datetime = Field(description="When this server stored it, by its own clock.")
    actor: str | None
    detail: str | None


class EventPageOut(Out):
    items: list[EventOut]
    next_after: int | None


Reversibility = Literal["reversible", "partial", "irreversible"]


class AttemptOut(Out):
    number: int
    started_at: datetime
    finished_at: datetime | None
    outcome: AttemptOutcome | None
    error: str | None
    actor: str | None


class StepOut(Out):
    id: str
    position: int
    tool_name: str
    state: StepState
    input: Any
    output: Any
    error: str | None
    error_type: str | None
    traceback: str | None
    has_undo: bool
    requires_approval: bool
    reversibility: Reversibility
    idempotency_key: str
    undo: dict[str, Any]
    undo_runner: Literal["nothing", "sagaboard", "agent"] = Field(
        description="Who runs the step's undo: nothing (no undo: skipped during rollback), "
        "sagaboard (a handler, webhook or command its workers run) or agent (the undo lives "
        "in the agent's process; a worker never attempts it). The compensation plan on the "
        "saga's page says what happens then."
    )
    created_at: datetime | None = Field(description=_AS_REPORTED)
    updated_at: datetime | None = Field(description=_AS_REPORTED)
    completed_at: datetime | None = Field(description=_AS_REPORTED)
    changed_at: datetime = Field(
        description="When this server last stored a move of the step, by its own clock."
    )
    attempts: list[AttemptOut]
    decision_note: str | None
    decided_by: str | None
    metadata: dict[str, Any]


class RollbackExceptionOut(Out):
    """A step whose side effect the rollback did not undo by its own undo."""

    step_id: str
    tool_name: str
    kind: ExceptionKind
    why: str


class SagaSummaryOut(Out):
    id: str
    name: str
    project: str
    status: SagaStatus
    outcome: RollbackOutcome | None = Field(
        description="How its rollback came to rest: CLEAN (every completed step undone by its "
        "undo) or WITH_EXCEPTIONS (an undo rejected, resolved by hand, left failed, in doubt, "
        "missing or not reached); null while no rollback has come to rest. A ROLLED_BACK "
        "saga is a clean rollback only when this is CLEAN."
    )
    outcome_summary: str = Field(description='The exceptions counted by kind, e.g. "1 rejected"')
    waiting_for: WaitingFor | None = Field(
        description="Whom a rollback that cannot go on by itself waits for: APPROVAL (an "
        "approver) or OPERATOR (retry, resolve or leave a failed or in-doubt undo); null if nobody"
    )
    status_text: str = Field(
        description='The status as a person must read it, e.g. "ROLLED BACK with exceptions '
        '(1 rejected)"'
    )
    driver: Literal["client", "server"]
    created_at: datetime = Field(description=_AS_REPORTED)
    updated_at: datetime = Field(description=_AS_REPORTED)
    received_at: datetime = Field(
        description="When this server first stored the saga, by its own clock."
    )
    changed_at: datetime = Field(
        description="When this server last stored a change to the saga or its steps, by its "
        "own clock: lists are newest first by it, and updated_after/updated_before filter on it."
    )
    seq: int
    next_step_number: int
    options: dict[str, Any]
    state: Any
    failed_step: str | None


class SagaOut(SagaSummaryOut):
    steps: list[StepOut]
    exceptions: list[RollbackExceptionOut] = Field(
        description="Every step not undone by its own undo, oldest first (empty for a clean "
        "rollback, or while none is under way)"
    )


class SagaPageOut(Out):
    items: list[SagaSummaryOut]
    next_cursor: str | None

"""API schemas (django-ninja / pydantic). Unknown fields are rejected, not ignored.

The transition event mirrors undo_core's ``SagaChange`` (see docs/api.md).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal, NoReturn

from django.http import HttpRequest
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from sagaboard import limits
from sagaboard.limits import InputRefused, JsonObject, JsonValue
from undo_core import (
    EventKind,
    ExceptionKind,
    RollbackOutcome,
    SagaStatus,
    StepState,
    WaitingFor,
)

ID = Field(min_length=1, max_length=100)
NAME = Field(min_length=1, max_length=200, json_schema_extra={"pattern": r"\S"})

_TIME_FORMAT = "expected an RFC 3339 date-time with its offset, e.g. 2026-01-31T12:00:00Z"
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)")


def _rfc3339(value: Any) -> Any:
    # pydantic alone takes 8 or "8" for 1970-01-01T00:00:08 and a time without an offset
    # as naive: both are outside the documented format (date-time), so both are refused.
    if isinstance(value, str) and _RFC3339.fullmatch(value):
        return value
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value
    raise PydanticCustomError("datetime_format", _TIME_FORMAT)


Timestamp = Annotated[datetime, BeforeValidator(_rfc3339)]
"""A time as the API takes it: RFC 3339 (ISO 8601 with a UTC offset), nothing looser."""


def _no_nul(value: str | None) -> str | None:
    # PostgreSQL text cannot hold NUL; keep every other character as sent.
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


def _not_blank(value: str) -> str:
    # undo_core refuses a saga or tool name that is only whitespace (str.strip); so do we,
    # before the engine is reached, and the schema says so (pattern: a non-space).
    if not value.strip():
        raise PydanticCustomError("blank", "must not be blank")
    return value


Name = Annotated[str, NAME, AfterValidator(_not_blank)]
"""A saga's or a tool's name: 1..200 characters, not all whitespace."""
EventId = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_nul)]
"""The client's idempotency key for one event or call."""
Text = Annotated[str, AfterValidator(_no_nul)]
"""A string as the server stores it: NUL reads as U+FFFD (PostgreSQL text cannot hold NUL),
so an id in a path or a filter finds what a body with the same characters stored."""


class StrictSchema(BaseModel):
    """Input bodies: plain pydantic (ninja's Schema wraps every nested model in a Python
    validator meant for ORM objects, which made a 100-event batch cost 30 ms to parse)."""

    model_config = ConfigDict(extra="forbid")


class AttemptIn(StrictSchema):
    number: int = Field(ge=1)
    started_at: datetime
    finished_at: datetime | None = None
    outcome: Literal["succeeded", "failed", "timed_out", "interrupted"] | None = None
    error: str | None = None
    actor: str | None = Field(default=None, max_length=200)

    _clean = field_validator("error", "actor")(_no_nul)


class SagaIn(StrictSchema):
    id: str = ID
    name: str = NAME
    status: SagaStatus
    created_at: datetime
    updated_at: datetime
    seq: int = Field(ge=1)
    next_step_number: int = Field(ge=1)
    options: dict[str, Any] = Field(default_factory=dict)
    state: Any = None
    failed_step: str | None = Field(default=None, max_length=100)

    _clean = field_validator("id", "name", "failed_step")(_no_nul)


class StepIn(StrictSchema):
    id: str = ID
    position: int = Field(ge=0)
    tool_name: str = NAME
    state: StepState
    input: Any = None
    output: Any = None
    error: str | None = None
    error_type: str | None = Field(default=None, max_length=200)
    traceback: str | None = None
    has_undo: bool = True
    requires_approval: bool = False
    reversibility: Literal["reversible", "partial", "irreversible"] = "reversible"
    idempotency_key: str = Field(min_length=1, max_length=250)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    completed_at: datetime | None = None
    attempts: list[AttemptIn] = Field(default_factory=list, max_length=1000)
    decision_note: str | None = None
    decided_by: str | None = Field(default=None, max_length=200)
    metadata: dict[str, Any] = Field(default_factory=dict)

    _clean = field_validator(
        "id", "tool_name", "error", "error_type", "traceback", "decision_note", "decided_by"
    )(_no_nul)


class EventInfoIn(StrictSchema):
    seq: int = Field(ge=1)
    kind: EventKind
    step_id: str | None = Field(default=None, max_length=100)
    tool_name: str | None = Field(default=None, max_length=200)
    from_state: str | None = Field(default=None, max_length=20)
    to_state: str = Field(max_length=20)
    at: datetime
    actor: str | None = Field(default=None, max_length=200)
    detail: str | None = None

    _clean = field_validator("step_id", "tool_name", "actor", "detail")(_no_nul)


class TransitionIn(StrictSchema):
    """One transition event. Its times, names, JSON values and texts are checked for the
    whole batch in one pass (``EventBatchIn``), not by a validator per field: a thousand
    events would pay some twenty Python calls each."""

    event_id: str = Field(min_length=1, max_length=200)
    type: Literal["transition"]
    saga: SagaIn
    step: StepIn | None = None
    event: EventInfoIn


class EventBatchIn(StrictSchema):
    events: list[TransitionIn] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _one_pass(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and isinstance(data.get("events"), list):
            request = info.context.get("request") if isinstance(info.context, dict) else None
            _BatchPass(len(request.body) if isinstance(request, HttpRequest) else None).run(
                data["events"]
            )
        return data


class _BatchPass:
    """What the batch checks in each raw event: times (RFC 3339), names (not blank), JSON
    values (depth, size), texts (size); NUL out of the strings PostgreSQL cannot hold it in.
    A mistyped part is skipped: the fields' own validation names it afterwards."""

    def __init__(self, body_size: int | None) -> None:
        self.depth, self.size = limits.max_json_depth(), limits.max_value_size()
        # A value is never (much) larger than the body it came in: measure only past it.
        self.measure = body_size is None or body_size > self.size
        self.index = 0

    def run(self, events: list[Any]) -> None:
        for self.index, event in enumerate(events):
            if type(event) is dict:
                self.event(event)

    def refuse(self, field: str, message: str) -> NoReturn:
        field = f"events[{self.index}].{field}"
        raise InputRefused(f"{field}: {message}", field, self.index)

    def event(self, event: dict[str, Any]) -> None:
        event_id = event.get("event_id")
        if type(event_id) is str and "\x00" in event_id:
            event["event_id"] = _no_nul(event_id)
        saga, step, info = event.get("saga"), event.get("step"), event.get("event")
        if type(saga) is dict:
            self.times(saga, "saga", "created_at", "updated_at")
            self.name(saga, "saga", "name")
            self.values(saga, "saga", "options", "state")
        if type(step) is dict:
            self.times(step, "step", "created_at", "updated_at", "completed_at")
            self.name(step, "step", "tool_name")
            self.values(step, "step", "input", "output", "metadata")
            self.texts(step, "step", "error", "traceback", "decision_note")
            self.nul_free(step, "idempotency_key")
            attempts = step.get("attempts")
            for n, attempt in enumerate(attempts if type(attempts) is list else ()):
                if type(attempt) is dict:
                    self.times(attempt, f"step.attempts[{n}]", "started_at", "finished_at")
                    self.texts(attempt, f"step.attempts[{n}]", "error")
        if type(info) is dict:
            self.times(info, "event", "at")
            self.texts(info, "event", "detail")
            self.nul_free(info, "from_state", "to_state")

    def times(self, obj: dict[str, Any], part: str, *names: str) -> None:
        for name in names:
            value = obj.get(name)
            if value is not None and not (type(value) is str and _RFC3339.fullmatch(value)):
                self.refuse(f"{part}.{name}", _TIME_FORMAT)

    def name(self, obj: dict[str, Any], part: str, name: str) -> None:
        value = obj.get(name)
        if type(value) is str and not value.strip():
            self.refuse(f"{part}.{name}", "must not be blank")

    def values(self, obj: dict[str, Any], part: str, *names: str) -> None:
        for name in names:
            value = obj.get(name)
            kind = type(value)
            if kind is str:
                self.texts(obj, part, name)
            elif kind is dict or kind is list:
                problem = limits.value_problem(
                    value, depth=self.depth, size=self.size, measure=self.measure
                )
                if problem is not None:
                    self.refuse(f"{part}.{name}", problem)

    def texts(self, obj: dict[str, Any], part: str, *names: str) -> None:
        for name in names:
            value = obj.get(name)
            if type(value) is str and len(value) > self.size:
                self.refuse(f"{part}.{name}", limits.too_large(self.size))

    @staticmethod
    def nul_free(obj: dict[str, Any], *names: str) -> None:
        for name in names:
            value = obj.get(name)
            if type(value) is str and "\x00" in value:
                obj[name] = _no_nul(value)


class UndoIn(StrictSchema):
    """How a step's undo runs: ``none`` (the default: nothing to undo), ``client`` (the
    agent undoes it itself), or in sagaboard: ``handler``, ``webhook``, ``command``."""

    kind: Literal["none", "client", "handler", "webhook", "command"] = "none"
    handler: str | None = Field(default=None, max_length=200)
    args: JsonObject = Field(default_factory=dict)
    url: str | None = Field(default=None, max_length=2000)
    command: str | None = Field(default=None, max_length=10_000)


class SagaBeginIn(StrictSchema):
    event_id: EventId
    id: str | None = Field(default=None, min_length=1, max_length=100)
    name: Name
    on_compensation_failure: Literal["continue", "halt"] = "halt"
    actor: str | None = Field(default=None, max_length=200)

    _clean = field_validator("id", "name", "actor")(_no_nul)


class StepAddIn(StrictSchema):
    event_id: EventId
    tool_name: Name
    input: JsonValue = None
    undo: UndoIn = Field(default_factory=UndoIn)
    requires_approval: bool = False
    reversibility: Literal["reversible", "partial", "irreversible"] = "reversible"

    _clean = field_validator("tool_name")(_no_nul)


class StepCompleteIn(StrictSchema):
    event_id: EventId
    output: JsonValue = None


class StepFailIn(StrictSchema):
    event_id: EventId
    error: str = Field(min_length=1, max_length=100_000)

    _clean = field_validator("error")(_no_nul)


class SagaActionIn(StrictSchema):
    event_id: EventId
    reason: str | None = Field(default=None, max_length=10_000)
    actor: str | None = Field(default=None, max_length=200)

    _clean = field_validator("reason", "actor")(_no_nul)


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


class EventBatchOut(Out):
    results: list[EventResultOut]


class ErrorBody(Out):
    code: str
    message: str
    field: str | None = None
    index: int | None = None
    event_id: str | None = None


class ErrorOut(Out):
    error: ErrorBody


class EventOut(Out):
    log_id: int
    event_id: str
    seq: int | None
    """None for an operator's event (a decision, an action): it has no engine sequence."""
    kind: str
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


class AttemptOut(Out):
    number: int
    started_at: datetime
    finished_at: datetime | None
    outcome: str | None
    error: str | None
    actor: str | None


class StepOut(Out):
    id: str
    position: int
    tool_name: str
    state: str
    input: Any
    output: Any
    error: str | None
    error_type: str | None
    traceback: str | None
    has_undo: bool
    requires_approval: bool
    reversibility: str
    idempotency_key: str
    undo: dict[str, Any]
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
    status: str
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
    driver: str
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

"""The event language: the transition events an agent posts, validated as ingestion needs them.

The transition event mirrors undo_core's ``SagaChange`` (docs/api.md). Ingestion and the
verifier read events through these schemas; the API shows them in its OpenAPI document.
Unknown fields are rejected, not ignored. Integers and booleans are strict (issue 36): ``true``,
``1.0`` or ``"1"`` is not a ``seq``, nor ``1`` or ``"true"`` a ``has_undo``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NoReturn

from django.http import HttpRequest
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from sagaboard.infra import text_policy
from sagaboard.infra.http import limits
from sagaboard.infra.http.limits import BIGINT, INT, InputRefused
from undo_core import (
    AttemptOutcome,
    EventKind,
    SagaStatus,
    StepState,
)

_ID_POLICY = (
    "An identifier: Unicode NFKC, no control, format (zero-width, bidi), surrogate, "
    "private-use or unassigned character, no space at either end or two in a row, "
    "letters of one script (docs/security.md, Text)."
)
_TEXT_POLICY = "Kept exactly as sent; NUL and lone surrogates are refused."
_VALUE_SIZE: dict[str, Any] = {"x-sagaboard-max-length": "SAGABOARD_MAX_VALUE_SIZE"}
"""Marks a text bounded by a setting: the OpenAPI schema states its current value."""

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


_OUT_OF_RANGE = "is out of range once converted to UTC (years 0001 to 9999)"


def utc_overflows(value: str) -> bool:
    """Whether an RFC 3339 time falls outside years 1..9999 in UTC (``9999-12-31T23:00-05:00``).

    Only the first and last years can: the rest is left to the parser, which names it.
    """
    if value[:4] not in ("0001", "9999"):
        return False
    try:
        datetime.fromisoformat(value.upper()).astimezone(UTC)
    except OverflowError:
        return True
    except ValueError:
        return False
    return False


def _in_utc_range(value: datetime) -> datetime:
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise PydanticCustomError("datetime_range", _OUT_OF_RANGE) from None
    return value


Timestamp = Annotated[datetime, BeforeValidator(_rfc3339), AfterValidator(_in_utc_range)]
"""A time as the API takes it: RFC 3339 (ISO 8601 with a UTC offset), nothing looser, and
within years 1..9999 once in UTC (a database stores it in UTC)."""


def _refused(kind: str, problem: str | None) -> None:
    if problem is not None:
        raise PydanticCustomError(kind, "{reason}", {"reason": problem})


def _identifier(value: str) -> str:
    _refused("identifier", text_policy.identifier_problem(value))
    return value


def _free_text(value: str) -> str:
    _refused("text", text_policy.text_problem(value))
    return value


def _name(value: str) -> str:
    _refused("name", text_policy.name_problem(value))
    return value


def identifier(max_length: int) -> Any:
    """An identifier field type (``sagaboard.infra.text_policy``) of at most ``max_length``."""
    return Annotated[
        str,
        Field(min_length=1, max_length=max_length, description=_ID_POLICY),
        AfterValidator(_identifier),
    ]


def free_text(max_length: int, min_length: int | None = None) -> Any:
    """Free text kept as sent (``sagaboard.infra.text_policy``) of at most ``max_length``."""
    field = Field(min_length=min_length, max_length=max_length, description=_TEXT_POLICY)
    return Annotated[str, field, AfterValidator(_free_text)]


Name = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        description="Free text (kept as sent) holding a visible character; no NUL or lone "
        "surrogate.",
    ),
    AfterValidator(_name),
]
"""A saga's name: 1..200 characters, one of them visible."""
EventId = identifier(200)
"""The client's idempotency key for one event or call."""
SagaId = identifier(100)
ToolName = identifier(200)
Text = Annotated[str, Field(max_length=200), AfterValidator(_free_text)]
"""An id or a filter in a path or a query, at most 200 characters (the longest stored id):
NUL and lone surrogates are refused (nothing stored holds them); other characters are
looked up as sent, so ids stored before the text policy stay reachable."""


class StrictSchema(BaseModel):
    """Input bodies: plain pydantic (ninja's Schema wraps every nested model in a Python
    validator meant for ORM objects, which made a 100-event batch cost 30 ms to parse)."""

    model_config = ConfigDict(extra="forbid")


# The parts of a transition event. Their texts follow sagaboard.infra.text_policy, checked for
# the whole batch by ``_BatchPass`` (not by a validator per field): the fields below only
# state the bounds, which the schema shows.
_IDENT: dict[str, Any] = {"description": _ID_POLICY}
_FREE: dict[str, Any] = {"description": _TEXT_POLICY}


class AttemptIn(StrictSchema):
    number: int = Field(ge=1, le=INT, strict=True)
    started_at: datetime
    finished_at: datetime | None = None
    outcome: AttemptOutcome | None = None
    error: str | None = Field(default=None, json_schema_extra={**_FREE, **_VALUE_SIZE})
    actor: str | None = Field(default=None, max_length=200, json_schema_extra=_FREE)


class SagaIn(StrictSchema):
    id: str = Field(min_length=1, max_length=100, json_schema_extra=_IDENT)
    name: str = Field(min_length=1, max_length=200, json_schema_extra={**_FREE, "pattern": r"\S"})
    status: SagaStatus
    created_at: datetime
    updated_at: datetime
    seq: int = Field(ge=1, le=BIGINT, strict=True)
    next_step_number: int = Field(ge=1, le=INT, strict=True)
    options: dict[str, Any] = Field(default_factory=dict)
    state: Any = None
    failed_step: str | None = Field(default=None, max_length=100, json_schema_extra=_IDENT)


class StepIn(StrictSchema):
    id: str = Field(min_length=1, max_length=100, json_schema_extra=_IDENT)
    position: int = Field(ge=0, le=INT, strict=True)
    tool_name: str = Field(min_length=1, max_length=200, json_schema_extra=_IDENT)
    state: StepState
    input: Any = None
    output: Any = None
    error: str | None = Field(default=None, json_schema_extra={**_FREE, **_VALUE_SIZE})
    error_type: str | None = Field(default=None, max_length=200, json_schema_extra=_FREE)
    traceback: str | None = Field(default=None, json_schema_extra={**_FREE, **_VALUE_SIZE})
    has_undo: bool = Field(default=True, strict=True)
    requires_approval: bool = Field(default=False, strict=True)
    reversibility: Literal["reversible", "partial", "irreversible"] = "reversible"
    idempotency_key: str = Field(min_length=1, max_length=250, json_schema_extra=_IDENT)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    completed_at: datetime | None = None
    attempts: list[AttemptIn] = Field(default_factory=list, max_length=1000)
    decision_note: str | None = Field(default=None, json_schema_extra={**_FREE, **_VALUE_SIZE})
    decided_by: str | None = Field(default=None, max_length=200, json_schema_extra=_FREE)
    metadata: dict[str, Any] = Field(default_factory=dict)


class EventInfoIn(StrictSchema):
    seq: int = Field(ge=1, le=BIGINT, strict=True)
    kind: EventKind
    step_id: str | None = Field(default=None, max_length=100, json_schema_extra=_IDENT)
    tool_name: str | None = Field(default=None, max_length=200, json_schema_extra=_IDENT)
    from_state: str | None = Field(default=None, max_length=20)
    to_state: str = Field(max_length=20)
    at: datetime
    actor: str | None = Field(default=None, max_length=200, json_schema_extra=_FREE)
    detail: str | None = Field(default=None, json_schema_extra={**_FREE, **_VALUE_SIZE})


class TransitionIn(StrictSchema):
    """One transition event. Its times, names, JSON values and texts are checked for the
    whole batch in one pass (``EventBatchIn``), not by a validator per field: a thousand
    events would pay some twenty Python calls each."""

    event_id: str = Field(min_length=1, max_length=200, json_schema_extra=_IDENT)
    type: Literal["transition"]
    saga: SagaIn
    step: StepIn | None = None
    event: EventInfoIn


class EventBatchIn(StrictSchema):
    events: list[TransitionIn] = Field(
        min_length=1, json_schema_extra={"x-sagaboard-max-items": "SAGABOARD_API_MAX_BATCH"}
    )

    @model_validator(mode="before")
    @classmethod
    def _one_pass(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and isinstance(data.get("events"), list):
            # The count first, before any work per event: 349,000 empty objects (1 MB) cost
            # a web process 11 s and 1.6 GB to be refused for their first event's id.
            problem = limits.batch_problem(len(data["events"]))
            if problem is not None:
                raise InputRefused(problem, "events")
            request = info.context.get("request") if isinstance(info.context, dict) else None
            _BatchPass(len(request.body) if isinstance(request, HttpRequest) else None).run(
                data["events"]
            )
        return data


class _BatchPass:
    """What the batch checks in each raw event: times (RFC 3339, within range in UTC),
    identifiers, names and texts (``sagaboard.infra.text_policy``), JSON values (depth, size),
    texts (size). A mistyped part is skipped: the fields' own validation names it
    afterwards."""

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
        self.identifiers(event, "", "event_id")
        saga, step, info = event.get("saga"), event.get("step"), event.get("event")
        if type(saga) is dict:
            self.identifiers(saga, "saga.", "id", "failed_step")
            self.times(saga, "saga", "created_at", "updated_at")
            self.name(saga, "saga", "name")
            self.values(saga, "saga", "options", "state")
        if type(step) is dict:
            self.identifiers(step, "step.", "id", "tool_name", "idempotency_key")
            self.times(step, "step", "created_at", "updated_at", "completed_at")
            self.values(step, "step", "input", "output", "metadata")
            self.texts(step, "step", "error", "traceback", "decision_note")
            self.short_texts(step, "step", "error_type", "decided_by")
            attempts = step.get("attempts")
            for n, attempt in enumerate(attempts if type(attempts) is list else ()):
                if type(attempt) is dict:
                    self.times(attempt, f"step.attempts[{n}]", "started_at", "finished_at")
                    self.texts(attempt, f"step.attempts[{n}]", "error")
                    self.short_texts(attempt, f"step.attempts[{n}]", "actor")
        if type(info) is dict:
            self.identifiers(info, "event.", "step_id", "tool_name")
            self.times(info, "event", "at")
            self.texts(info, "event", "detail")
            self.short_texts(info, "event", "actor", "from_state", "to_state")

    def identifiers(self, obj: dict[str, Any], part: str, *names: str) -> None:
        for name in names:
            value = obj.get(name)
            if type(value) is str:
                problem = text_policy.identifier_problem(value)
                if problem is not None:
                    self.refuse(f"{part}{name}", problem)

    def times(self, obj: dict[str, Any], part: str, *names: str) -> None:
        for name in names:
            value = obj.get(name)
            if value is None:
                continue
            if not (type(value) is str and _RFC3339.fullmatch(value)):
                self.refuse(f"{part}.{name}", _TIME_FORMAT)
            if utc_overflows(value):
                self.refuse(f"{part}.{name}", _OUT_OF_RANGE)

    def name(self, obj: dict[str, Any], part: str, name: str) -> None:
        value = obj.get(name)
        if type(value) is str:
            problem = text_policy.name_problem(value)
            if problem is not None:
                self.refuse(f"{part}.{name}", problem)

    def values(self, obj: dict[str, Any], part: str, *names: str) -> None:
        # Lone surrogates and numbers past a double's range were refused with the body
        # (sagaboard.infra.http.json_body): only Python's parser lets them through, and only there.
        for name in names:
            value: Any = obj.get(name)
            kind = type(value)
            if kind is str:  # a JSON string: NUL is kept (stored escaped)
                if len(value) > self.size:
                    self.refuse(f"{part}.{name}", limits.too_large(self.size))
            elif kind is dict or kind is list:
                problem = limits.value_problem(
                    value, depth=self.depth, size=self.size, measure=self.measure
                )
                if problem is not None:
                    self.refuse(f"{part}.{name}", problem)

    def texts(self, obj: dict[str, Any], part: str, *names: str) -> None:
        for name in names:
            value = obj.get(name)
            if type(value) is str:
                if len(value) > self.size:
                    self.refuse(f"{part}.{name}", limits.too_large(self.size))
                self.text(value, part, name)

    def short_texts(self, obj: dict[str, Any], part: str, *names: str) -> None:
        for name in names:
            value = obj.get(name)
            if type(value) is str:
                self.text(value, part, name)

    def text(self, value: str, part: str, name: str) -> None:
        problem = text_policy.text_problem(value)
        if problem is not None:
            self.refuse(f"{part}.{name}", problem)

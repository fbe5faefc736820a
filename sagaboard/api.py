"""API v1 (django-ninja): thin handlers over services and selectors.

Every error leaves as ``{"error": {"code", "message", "field", ...}}`` (docs/api.md).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from ninja import Query, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.renderers import JSONRenderer
from ninja.responses import NinjaJSONEncoder
from ninja.security import HttpBearer

from sagaboard import api_links, openapi_bounds, sagas, selectors
from sagaboard.ingest import IngestError, events_ingest
from sagaboard.json_body import BadValue
from sagaboard.limits import InputRefused, JsonParser, NotJson
from sagaboard.models import ApiToken, Saga, Step
from sagaboard.rate_limits import (
    RateLimited,
    client_ip,
    hit,
    parse_rate,
    wait_seconds,
)
from sagaboard.schemas import (
    BIGINT,
    ErrorOut,
    EventBatchIn,
    EventBatchOut,
    EventPageOut,
    SagaActionIn,
    SagaBeginIn,
    SagaOut,
    SagaPageOut,
    SagaSummaryOut,
    StepAddIn,
    StepCompleteIn,
    StepFailIn,
    StepOut,
    Text,
    Timestamp,
)
from sagaboard.tokens import token_authenticate
from undo_core import SagaStatus

log = logging.getLogger(__name__)


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        found = token_authenticate(token)
        if found is None:
            # Only failures are counted, and only they are refused: a good token pays
            # nothing on this path and still works from an address (a NAT) that also
            # sends bad ones. Guessing a 256-bit secret is hopeless anyway; the limit
            # stops floods of bad tokens and probing.
            ip, rate = client_ip(request), parse_rate(settings.SAGABOARD_API_AUTH_RATE)
            if rate is not None and hit("api-auth", ip, rate) > rate.count:
                raise RateLimited(wait_seconds("api-auth", ip, rate))
        return found


class _Encoder(NinjaJSONEncoder):
    """Times with their full microseconds (Django's encoder cuts them to milliseconds)."""

    def default(self, o: Any) -> Any:
        if isinstance(o, datetime):
            return o.isoformat()
        return super().default(o)


class _Renderer(JSONRenderer):
    encoder_class = _Encoder


api = openapi_bounds.BoundedNinjaAPI(
    renderer=_Renderer(),
    parser=JsonParser(),
    title="sagaboard",
    version="1",
    description="Saga events from AI agents; see docs/api.md.",
    urls_namespace="api-v1",
    auth=TokenAuth(),
)

# Every operation may answer these, all as ErrorOut (docs/api.md, "Errors"): a body that is
# not JSON (400), no token (401), an unknown id (404), a refused move (409), a body over the
# limit (413, sagaboard.body_limit), invalid input or a limit (422), a busy database (503).
ERRORS: dict[int | str, Any] = {
    400: ErrorOut,
    401: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    422: ErrorOut,
    429: ErrorOut,
    503: ErrorOut,
}


def _error(
    request: HttpRequest, status: int, code: str, message: str, **extra: Any
) -> HttpResponse:
    body = {"code": code, "message": message}
    body.update({k: v for k, v in extra.items() if v is not None})
    return api.create_response(request, {"error": body}, status=status)


@api.exception_handler(IngestError)
def _ingest_error(request: HttpRequest, exc: IngestError) -> HttpResponse:
    response = _error(
        request,
        exc.status,
        exc.code,
        exc.message,
        field=exc.field,
        index=exc.index,
        event_id=exc.event_id,
    )
    if exc.status == 503:
        response["Retry-After"] = "1"
    return response


@api.exception_handler(InputRefused)
def _input_refused(request: HttpRequest, exc: InputRefused) -> HttpResponse:
    return _error(request, 422, "validation_error", exc.message, field=exc.field, index=exc.index)


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    first = exc.errors[0] if exc.errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "payload", "query", "path")]
    # Items of a list by their index in brackets (events[0].step.attempts[1].number), as
    # the checks of a whole batch and of JSON values name them.
    field = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".") or None
    index = int(loc[1]) if len(loc) > 1 and loc[0] == "events" and loc[1].isdigit() else None
    message = first.get("msg", "invalid request")
    return _error(
        request,
        422,
        "validation_error",
        f"{field}: {message}" if field else message,
        field=field,
        index=index,
    )


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    response = _error(
        request, 401, "unauthorized", "a valid 'Authorization: Bearer' token is required"
    )
    response["WWW-Authenticate"] = openapi_bounds.WWW_AUTHENTICATE  # RFC 6750
    return response


@api.exception_handler(RateLimited)
def _rate_limited(request: HttpRequest, exc: RateLimited) -> HttpResponse:
    response = _error(
        request,
        429,
        "rate_limited",
        f"too many failed authentications from this address: retry after {exc.retry_after} s",
    )
    response["Retry-After"] = str(exc.retry_after)
    return response


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    cause = exc.__cause__
    if isinstance(cause, BadValue):  # a value the body holds cannot be stored: name it
        field = cause.path or None
        index = None
        if field is not None and field.startswith("events["):
            index = int(field[len("events[") : field.index("]")])
        return _error(request, 422, "validation_error", str(cause), field=field, index=index)
    if exc.status_code == 400:
        message = str(cause) if isinstance(cause, NotJson) else "the request body is not valid JSON"
        return _error(request, 400, "malformed_json", message)
    return _error(request, exc.status_code, "error", str(exc))


@api.exception_handler(Exception)
def _server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    # A bug, not the client's fault: logged with its traceback, answered in the API's shape
    # (never Django's HTML page). The request's transaction has been rolled back.
    log.exception("API request failed: %s %s", request.method, request.path)
    return _error(request, 500, "internal_error", "the server failed; nothing was applied")


@api.exception_handler(OperationalError)
def _database_unavailable(request: HttpRequest, exc: OperationalError) -> HttpResponse:
    # The database is busy or away: nothing was applied, and the client should retry.
    response = _error(request, 503, "unavailable", "the database is unavailable; retry shortly")
    response["Retry-After"] = "1"
    return response


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    message = f"the body is over {limit} bytes (SAGABOARD_API_MAX_BODY)"
    return _error(request, 413, "payload_too_large", message)


def _token(request: HttpRequest) -> ApiToken:
    token: ApiToken = request.auth  # type: ignore[attr-defined]
    return token


# ---------------------------------------------------------------- events


@api.post("/events", response={200: EventBatchOut, **ERRORS}, tags=["events"])
def post_events(request: HttpRequest, payload: EventBatchIn) -> HttpResponse:
    """Apply transition events (one or a batch) atomically, in order, idempotently."""
    limit = settings.SAGABOARD_API_MAX_BATCH
    if len(payload.events) > limit:
        raise IngestError(422, "validation_error", f"at most {limit} events per batch", "events")
    token = _token(request)
    sent = request.parsed_body["events"]  # type: ignore[attr-defined]
    results = events_ingest(
        project=token.project, events=payload.events, token_pk=token.pk, sent=sent
    )
    # Written directly (the shape is EventBatchOut): validating and encoding a thousand
    # results through the schema cost more than storing some of them.
    body = orjson.dumps({"results": [r.__dict__ for r in results]})
    return HttpResponse(body, content_type="application/json")


# ---------------------------------------------------------------- sagas


def _summary(saga: Saga) -> dict[str, Any]:
    return {
        "id": saga.saga_id,
        "name": saga.name,
        "project": saga.project.slug,
        "status": saga.status,
        "driver": saga.driver,
        "created_at": saga.created_at,
        "updated_at": saga.updated_at,
        "received_at": saga.received_at,
        "changed_at": saga.changed_at,
        "seq": saga.seq,
        "next_step_number": saga.next_step_number,
        "options": saga.options,
        "state": saga.state,
        "failed_step": saga.failed_step,
    }


def _step(step: Step) -> dict[str, Any]:
    return {
        "id": step.step_id,
        "position": step.position,
        "tool_name": step.tool_name,
        "state": step.state,
        "input": step.input,
        "output": step.output,
        "error": step.error,
        "error_type": step.error_type,
        "traceback": step.traceback,
        "has_undo": step.has_undo,
        "requires_approval": step.requires_approval,
        "reversibility": step.reversibility,
        "idempotency_key": step.idempotency_key,
        "undo": step.undo or {},
        "created_at": step.created_at,
        "updated_at": step.updated_at,
        "completed_at": step.completed_at,
        "changed_at": step.changed_at,
        "attempts": list(step.attempts.all()),
        "decision_note": step.decision_note,
        "decided_by": step.decided_by,
        "metadata": step.metadata or {},
    }


def _saga_out(request: HttpRequest, saga_id: str) -> dict[str, Any]:
    saga = selectors.saga_get_for_project(project=_token(request).project, saga_id=saga_id)
    if saga is None:
        raise IngestError(404, "not_found", f"no saga {saga_id!r} in this project", "saga_id")
    return {**_summary(saga), "steps": [_step(s) for s in saga.steps.all()]}


def _step_out(request: HttpRequest, saga_id: str, step_id: str) -> dict[str, Any]:
    saga = selectors.saga_get_for_project(project=_token(request).project, saga_id=saga_id)
    step = next((s for s in saga.steps.all() if s.step_id == step_id), None) if saga else None
    if step is None:
        raise IngestError(404, "not_found", f"no step {step_id!r} in saga {saga_id!r}", "step_id")
    return _step(step)


@api.get("/sagas/{saga_id}", response={200: SagaOut, **ERRORS}, tags=["sagas"])
def get_saga(request: HttpRequest, saga_id: Text) -> Any:
    """One saga with its steps and their compensation attempts."""
    return _saga_out(request, saga_id)


@api.get("/sagas/{saga_id}/events", response={200: EventPageOut, **ERRORS}, tags=["sagas"])
def list_saga_events(
    request: HttpRequest,
    saga_id: Text,
    after: int = Query(0, ge=0, le=BIGINT),
    limit: int = Query(500, ge=1, le=1000),
) -> Any:
    """The saga's event log, oldest first; pass the last ``log_id`` as ``after`` to go on."""
    saga = selectors.saga_get_for_project(project=_token(request).project, saga_id=saga_id)
    if saga is None:
        raise IngestError(404, "not_found", f"no saga {saga_id!r} in this project", "saga_id")
    rows = selectors.event_list_for_saga(saga=saga, after=after, limit=limit)
    items = [
        {
            "log_id": e.pk,
            "event_id": e.client_event_id,
            "seq": e.seq,
            "kind": e.kind,
            "step_id": e.step_id,
            "tool_name": e.tool_name,
            "from_state": e.from_state,
            "to_state": e.to_state,
            "at": e.at,
            "recorded_at": e.recorded_at,
            "actor": e.actor,
            "detail": e.detail,
        }
        for e in rows
    ]
    return {"items": items, "next_after": rows[-1].pk if len(rows) == limit else None}


# ---------------------------------------------------------------- driving a saga by hand


@api.post(
    "/sagas",
    response={201: SagaOut, **ERRORS},
    tags=["manual flow"],
    openapi_extra=api_links.BEGIN_SAGA,
)
def begin_saga(request: HttpRequest, payload: SagaBeginIn) -> Any:
    """Begin a saga that sagaboard drives (the seed's ``saga_begin``)."""
    saga_id = sagas.saga_begin(
        project=_token(request).project,
        token_pk=_token(request).pk,
        event_id=payload.event_id,
        name=payload.name,
        saga_id=payload.id,
        on_compensation_failure=payload.on_compensation_failure,
        actor=payload.actor,
    )
    return Status(201, _saga_out(request, saga_id))


@api.post(
    "/sagas/{saga_id}/steps",
    response={201: StepOut, **ERRORS},
    tags=["manual flow"],
    openapi_extra=api_links.ADD_STEP,
)
def add_step(request: HttpRequest, saga_id: Text, payload: StepAddIn) -> Any:
    """Register a step and how its undo runs (``saga_add_step``)."""
    step_id = sagas.step_add(
        project=_token(request).project,
        event_id=payload.event_id,
        saga_id=saga_id,
        tool_name=payload.tool_name,
        input=payload.input,
        undo=payload.undo.model_dump(exclude_none=True),
        requires_approval=payload.requires_approval,
        reversibility=payload.reversibility,
    )
    return Status(201, _step_out(request, saga_id, step_id))


@api.post(
    "/sagas/{saga_id}/steps/{step_id}/complete",
    response={200: StepOut, **ERRORS},
    tags=["manual flow"],
    openapi_extra=api_links.STEP_MOVED,
)
def complete_step(
    request: HttpRequest, saga_id: Text, step_id: Text, payload: StepCompleteIn
) -> Any:
    """Mark a step completed with its output (``saga_complete_step``)."""
    sagas.step_complete(
        project=_token(request).project,
        event_id=payload.event_id,
        saga_id=saga_id,
        step_id=step_id,
        output=payload.output,
    )
    return _step_out(request, saga_id, step_id)


@api.post(
    "/sagas/{saga_id}/steps/{step_id}/fail",
    response={200: StepOut, **ERRORS},
    tags=["manual flow"],
    openapi_extra=api_links.STEP_MOVED,
)
def fail_step(request: HttpRequest, saga_id: Text, step_id: Text, payload: StepFailIn) -> Any:
    """Mark a step failed (``saga_fail_step``); the saga stays open until a rollback."""
    sagas.step_fail(
        project=_token(request).project,
        event_id=payload.event_id,
        saga_id=saga_id,
        step_id=step_id,
        error=payload.error,
    )
    return _step_out(request, saga_id, step_id)


@api.post("/sagas/{saga_id}/complete", response={200: SagaOut, **ERRORS}, tags=["manual flow"])
def complete_saga(request: HttpRequest, saga_id: Text, payload: SagaActionIn) -> Any:
    """Finish the saga successfully."""
    sagas.saga_complete(project=_token(request).project, event_id=payload.event_id, saga_id=saga_id)
    return _saga_out(request, saga_id)


@api.post("/sagas/{saga_id}/rollback", response={202: SagaOut, **ERRORS}, tags=["manual flow"])
def rollback_saga(request: HttpRequest, saga_id: Text, payload: SagaActionIn) -> Any:
    """Request a rollback (``saga_rollback``): the saga becomes COMPENSATING.

    Server-side undos then run in workers, newest first, each under its approval rules.
    The answer is read after the commit, so a quick worker may already show further along.
    """
    sagas.saga_rollback_request(
        project=_token(request).project,
        event_id=payload.event_id,
        saga_id=saga_id,
        reason=payload.reason,
        actor=payload.actor,
    )
    return Status(202, _saga_out(request, saga_id))


@api.get(
    "/sagas",
    response={200: SagaPageOut, **ERRORS},
    tags=["sagas"],
    openapi_extra=api_links.LIST_SAGAS,
)
def list_sagas(
    request: HttpRequest,
    status: Query[list[SagaStatus] | None] = None,
    tool: Text | None = None,
    q: Text | None = None,
    updated_after: Timestamp | None = None,
    updated_before: Timestamp | None = None,
    cursor: Text | None = None,
    limit: int = Query(50, ge=1, le=500),
) -> Any:
    """Sagas newest first, filtered; follow ``next_cursor`` for the next page.

    "Newest", ``updated_after`` and ``updated_before`` go by the server's clock: when it
    last stored a change to the saga (``changed_at``), not the ``updated_at`` the agent
    reported.
    """
    try:
        rows, next_cursor = selectors.saga_list(
            projects=[_token(request).project],
            statuses=status or (),
            tool=tool,
            q=q,
            updated_after=updated_after,
            updated_before=updated_before,
            cursor=cursor,
            limit=limit,
        )
    except selectors.BadCursor as err:
        return _error(request, 422, "validation_error", str(err), field="cursor")
    return {"items": [_summary(s) for s in rows], "next_cursor": next_cursor}


__all__ = ["SagaSummaryOut", "StepOut", "api"]


from sagaboard.api_decisions import router as _decisions  # noqa: E402

api.add_router("/", _decisions)

"""API v1 (django-ninja): thin handlers over services and selectors.

Every error leaves as ``{"error": {"code", "message", "field", ...}}`` (docs/api.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI, Query
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer

from sagaboard import selectors
from sagaboard.ingest import IngestError, events_ingest
from sagaboard.models import ApiToken, Saga, Step
from sagaboard.schemas import (
    ErrorOut,
    EventBatchIn,
    EventBatchOut,
    SagaOut,
    SagaPageOut,
    SagaSummaryOut,
    StepOut,
)
from sagaboard.tokens import token_authenticate


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        return token_authenticate(token)


api = NinjaAPI(
    title="sagaboard",
    version="1",
    description="Saga events from AI agents; see docs/api.md.",
    urls_namespace="api-v1",
    auth=TokenAuth(),
)

ERRORS: dict[int | str, Any] = {
    400: ErrorOut,
    401: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    422: ErrorOut,
}


def _error(
    request: HttpRequest, status: int, code: str, message: str, **extra: Any
) -> HttpResponse:
    body = {"code": code, "message": message}
    body.update({k: v for k, v in extra.items() if v is not None})
    return api.create_response(request, {"error": body}, status=status)


@api.exception_handler(IngestError)
def _ingest_error(request: HttpRequest, exc: IngestError) -> HttpResponse:
    return _error(
        request,
        exc.status,
        exc.code,
        exc.message,
        field=exc.field,
        index=exc.index,
        event_id=exc.event_id,
    )


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    first = exc.errors[0] if exc.errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "payload", "query")]
    field = ".".join(loc).replace(".[", "[") or None
    index = None
    if len(loc) > 1 and loc[0] == "events" and loc[1].isdigit():
        index = int(loc[1])
        field = "events[" + loc[1] + "]" + "".join(f".{p}" for p in loc[2:])
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
    return _error(request, 401, "unauthorized", "a valid 'Authorization: Bearer' token is required")


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if exc.status_code == 400:
        return _error(request, 400, "malformed_json", "the request body is not valid JSON")
    return _error(request, exc.status_code, "error", str(exc))


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return _error(request, 413, "payload_too_large", f"the body is over {limit} bytes")


def _token(request: HttpRequest) -> ApiToken:
    token: ApiToken = request.auth  # type: ignore[attr-defined]
    return token


# ---------------------------------------------------------------- events


@api.post("/events", response={200: EventBatchOut, **ERRORS}, tags=["events"])
def post_events(request: HttpRequest, payload: EventBatchIn) -> dict[str, Any]:
    """Apply transition events (one or a batch) atomically, in order, idempotently."""
    limit = settings.SAGABOARD_API_MAX_BATCH
    if len(payload.events) > limit:
        raise IngestError(422, "validation_error", f"at most {limit} events per batch", "events")
    results = events_ingest(project=_token(request).project, events=payload.events)
    return {"results": [r.__dict__ for r in results]}


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
        "attempts": list(step.attempts.all()),
        "decision_note": step.decision_note,
        "decided_by": step.decided_by,
        "metadata": step.metadata or {},
    }


@api.get("/sagas/{saga_id}", response={200: SagaOut, **ERRORS}, tags=["sagas"])
def get_saga(request: HttpRequest, saga_id: str) -> Any:
    """One saga with its steps and their compensation attempts."""
    saga = selectors.saga_get_for_project(project=_token(request).project, saga_id=saga_id)
    if saga is None:
        return _error(request, 404, "not_found", f"no saga {saga_id!r} in this project")
    return {**_summary(saga), "steps": [_step(s) for s in saga.steps.all()]}


@api.get("/sagas", response={200: SagaPageOut, **ERRORS}, tags=["sagas"])
def list_sagas(
    request: HttpRequest,
    status: Query[list[str] | None] = None,
    tool: str | None = None,
    q: str | None = None,
    updated_after: datetime | None = None,
    updated_before: datetime | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> Any:
    """Sagas newest first, filtered; follow ``next_cursor`` for the next page."""
    if not 1 <= limit <= 500:
        return _error(request, 422, "validation_error", "limit must be 1..500", field="limit")
    try:
        rows, next_cursor = selectors.saga_list_for_project(
            project=_token(request).project,
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

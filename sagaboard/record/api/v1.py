"""What agents post and read (API v1, django-ninja): events, sagas, the manual flow.

Thin handlers over services and reads; ``sagaboard.config.api`` mounts this router with the
others. Every error leaves as ``{"error": {"code", "message", "field", ...}}``
(docs/api.md), by the one map of ``sagaboard.api.errors``.
"""

from __future__ import annotations

from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Status

from sagaboard.access.api.caller import caller_token
from sagaboard.access.reads import visible
from sagaboard.actions.services import saga_stop
from sagaboard.api import links
from sagaboard.api.errors import ERRORS
from sagaboard.api.event_schema import BIGINT, EventBatchIn, Text, Timestamp
from sagaboard.api.schemas import (
    EventBatchOut,
    EventPageOut,
    RollbackRequestsOut,
    SagaActionIn,
    SagaBeginIn,
    SagaOut,
    SagaPageOut,
    SagaSummaryOut,
    StepAddIn,
    StepCompleteIn,
    StepFailIn,
    StepOut,
)
from sagaboard.engine.reads import rollback_outcomes
from sagaboard.engine.services import undo_kinds
from sagaboard.engine.services.record_columns import (
    SAGA_MIRRORED,
    STEP_MIRRORED,
    STEP_OWN_ROWS,
    mirrored,
)
from sagaboard.errors import ServiceError
from sagaboard.models import Saga, Step
from sagaboard.record.services import manual_flow
from sagaboard.record.services.ingest import events_ingest
from undo_core import RollbackOutcome, SagaStatus, assess_rollback, status_text

router = Router()


# ---------------------------------------------------------------- events


@router.post("/events", response={200: EventBatchOut, **ERRORS}, tags=["events"])
def post_events(request: HttpRequest, payload: EventBatchIn) -> HttpResponse:
    """Apply transition events (one or a batch) atomically, in order, idempotently.

    At most ``SAGABOARD_API_MAX_BATCH`` events: ``EventBatchIn`` counts them before
    reading any (``limits.batch_problem``)."""
    token = caller_token(request)
    sent = request.parsed_body["events"]  # type: ignore[attr-defined]
    ingested = events_ingest(
        project=token.project, events=payload.events, token_pk=token.pk, sent=sent
    )
    # Written directly (the shape is EventBatchOut): validating and encoding a thousand
    # results through the schema cost more than storing some of them.
    answer: dict[str, Any] = {"results": [r.__dict__ for r in ingested.results]}
    if ingested.rollback_requested:  # rollbacks operators asked of these sagas: the SDK hears
        answer["rollback_requested"] = ingested.rollback_requested
    return HttpResponse(orjson.dumps(answer), content_type="application/json")


@router.get(
    "/rollback-requests",
    response={200: RollbackRequestsOut, **ERRORS},
    tags=["events"],
    summary="Rollbacks operators asked for, of this project's running sagas",
)
def list_rollback_requests(request: HttpRequest) -> Any:
    """What the SDK asks while idle (a long step): each pending request, oldest first.

    Asking marks them heard: the saga page then says the agent was told.
    """
    return {"rollback_requested": saga_stop.rollback_requests_for(caller_token(request).project)}


# ---------------------------------------------------------------- sagas


def _summary(saga: Saga) -> dict[str, Any]:
    return {
        "id": saga.saga_id,
        **mirrored(saga, SAGA_MIRRORED),
        "project": saga.project.slug,
        "driver": saga.driver,
        "received_at": saga.received_at,
        "changed_at": saga.changed_at,
        "outcome": saga.outcome,
        "outcome_summary": saga.outcome_summary,
        "waiting_for": saga.waiting_for,
        "status_text": status_text(
            saga.status, saga.outcome, saga.outcome_summary, saga.waiting_for
        ),
    }


def _step(step: Step) -> dict[str, Any]:
    return {
        "id": step.step_id,
        **mirrored(step, STEP_MIRRORED, skip=STEP_OWN_ROWS),
        "metadata": step.metadata or {},
        "undo": step.undo or {},
        "undo_runner": undo_kinds.undo_runner(step.has_undo, step.undo),
        "changed_at": step.changed_at,
        "attempts": list(step.attempts.all()),
    }


def _saga_out(request: HttpRequest, saga_id: str) -> dict[str, Any]:
    saga = visible.saga_get_for_project(project=caller_token(request).project, saga_id=saga_id)
    if saga is None:
        raise ServiceError(404, "not_found", f"no saga {saga_id!r} in this project", "saga_id")
    steps = list(saga.steps.all())
    found = assess_rollback(SagaStatus(saga.status), [rollback_outcomes.facts(s) for s in steps])
    exceptions = [
        {"step_id": e.step_id, "tool_name": e.tool_name, "kind": e.kind, "why": e.why}
        for e in found.exceptions
    ]
    return {**_summary(saga), "steps": [_step(s) for s in steps], "exceptions": exceptions}


def _step_out(request: HttpRequest, saga_id: str, step_id: str) -> dict[str, Any]:
    saga = visible.saga_get_for_project(project=caller_token(request).project, saga_id=saga_id)
    step = next((s for s in saga.steps.all() if s.step_id == step_id), None) if saga else None
    if step is None:
        raise ServiceError(404, "not_found", f"no step {step_id!r} in saga {saga_id!r}", "step_id")
    return _step(step)


@router.get("/sagas/{saga_id}", response={200: SagaOut, **ERRORS}, tags=["sagas"])
def get_saga(request: HttpRequest, saga_id: Text) -> Any:
    """One saga with its steps and their compensation attempts."""
    return _saga_out(request, saga_id)


@router.get("/sagas/{saga_id}/events", response={200: EventPageOut, **ERRORS}, tags=["sagas"])
def list_saga_events(
    request: HttpRequest,
    saga_id: Text,
    after: int = Query(0, ge=0, le=BIGINT),
    limit: int = Query(500, ge=1, le=1000),
) -> Any:
    """The saga's event log, oldest first; pass the last ``log_id`` as ``after`` to go on."""
    saga = visible.saga_get_for_project(project=caller_token(request).project, saga_id=saga_id)
    if saga is None:
        raise ServiceError(404, "not_found", f"no saga {saga_id!r} in this project", "saga_id")
    rows = visible.event_list_for_saga(saga=saga, after=after, limit=limit)
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


@router.post(
    "/sagas",
    response={201: SagaOut, **ERRORS},
    tags=["manual flow"],
    openapi_extra=links.BEGIN_SAGA,
)
def begin_saga(request: HttpRequest, payload: SagaBeginIn) -> Any:
    """Begin a saga that sagaboard drives (the seed's ``saga_begin``)."""
    saga_id = manual_flow.saga_begin(
        project=caller_token(request).project,
        token_pk=caller_token(request).pk,
        event_id=payload.event_id,
        name=payload.name,
        saga_id=payload.id,
        on_compensation_failure=payload.on_compensation_failure,
        actor=payload.actor,
    )
    return Status(201, _saga_out(request, saga_id))


@router.post(
    "/sagas/{saga_id}/steps",
    response={201: StepOut, **ERRORS},
    tags=["manual flow"],
    openapi_extra=links.ADD_STEP,
)
def add_step(request: HttpRequest, saga_id: Text, payload: StepAddIn) -> Any:
    """Register a step and how its undo runs (``saga_add_step``)."""
    step_id = manual_flow.step_add(
        project=caller_token(request).project,
        event_id=payload.event_id,
        saga_id=saga_id,
        tool_name=payload.tool_name,
        input=payload.input,
        undo=payload.undo.model_dump(exclude_none=True),
        requires_approval=payload.requires_approval,
        reversibility=payload.reversibility,
        traceparent=payload.traceparent,
    )
    return Status(201, _step_out(request, saga_id, step_id))


@router.post(
    "/sagas/{saga_id}/steps/{step_id}/complete",
    response={200: StepOut, **ERRORS},
    tags=["manual flow"],
    openapi_extra=links.STEP_MOVED,
)
def complete_step(
    request: HttpRequest, saga_id: Text, step_id: Text, payload: StepCompleteIn
) -> Any:
    """Mark a step completed with its output (``saga_complete_step``)."""
    manual_flow.step_complete(
        project=caller_token(request).project,
        event_id=payload.event_id,
        saga_id=saga_id,
        step_id=step_id,
        output=payload.output,
    )
    return _step_out(request, saga_id, step_id)


@router.post(
    "/sagas/{saga_id}/steps/{step_id}/fail",
    response={200: StepOut, **ERRORS},
    tags=["manual flow"],
    openapi_extra=links.STEP_MOVED,
)
def fail_step(request: HttpRequest, saga_id: Text, step_id: Text, payload: StepFailIn) -> Any:
    """Mark a step failed (``saga_fail_step``); the saga stays open until a rollback."""
    manual_flow.step_fail(
        project=caller_token(request).project,
        event_id=payload.event_id,
        saga_id=saga_id,
        step_id=step_id,
        error=payload.error,
    )
    return _step_out(request, saga_id, step_id)


@router.post("/sagas/{saga_id}/complete", response={200: SagaOut, **ERRORS}, tags=["manual flow"])
def complete_saga(request: HttpRequest, saga_id: Text, payload: SagaActionIn) -> Any:
    """Finish the saga successfully."""
    manual_flow.saga_complete(
        project=caller_token(request).project, event_id=payload.event_id, saga_id=saga_id
    )
    return _saga_out(request, saga_id)


@router.post("/sagas/{saga_id}/rollback", response={202: SagaOut, **ERRORS}, tags=["manual flow"])
def rollback_saga(request: HttpRequest, saga_id: Text, payload: SagaActionIn) -> Any:
    """Request a rollback (``saga_rollback``): the saga becomes COMPENSATING.

    Server-side undos then run in workers, newest first, each under its approval rules.
    The answer is read after the commit, so a quick worker may already show further along.
    """
    manual_flow.saga_rollback_request(
        project=caller_token(request).project,
        event_id=payload.event_id,
        saga_id=saga_id,
        reason=payload.reason,
        actor=payload.actor,
    )
    return Status(202, _saga_out(request, saga_id))


@router.get(
    "/sagas",
    response={200: SagaPageOut, **ERRORS},
    tags=["sagas"],
    openapi_extra=links.LIST_SAGAS,
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
    outcome: RollbackOutcome | None = None,
    waiting: bool = False,
) -> Any:
    """Sagas newest first, filtered; follow ``next_cursor`` for the next page.

    "Newest", ``updated_after`` and ``updated_before`` go by the server's clock: when it
    last stored a change to the saga (``changed_at``), not the ``updated_at`` the agent
    reported.
    ``outcome``: only rollbacks that came to rest CLEAN or WITH_EXCEPTIONS; ``waiting``:
    only sagas whose rollback waits for a person.
    """
    try:
        rows, next_cursor = visible.saga_list(
            projects=[caller_token(request).project],
            statuses=status or (),
            tool=tool,
            q=q,
            updated_after=updated_after,
            updated_before=updated_before,
            cursor=cursor,
            limit=limit,
            outcome=outcome.value if outcome else None,
            waiting=waiting,
        )
    except visible.BadCursor as err:
        raise ServiceError(422, "validation_error", str(err), "cursor") from err
    return {"items": [_summary(s) for s in rows], "next_cursor": next_cursor}


__all__ = ["SagaSummaryOut", "StepOut", "router"]

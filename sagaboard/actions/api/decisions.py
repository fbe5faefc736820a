"""API v1 for agents that run sagas in their own process: ask for decisions, wait for them.

Thin handlers over ``sagaboard.actions.services.decisions`` (see docs/api.md, "Decisions"). A
token asks and waits; only people decide (there is no approve call here).
The long-polls are async views: waiting holds neither a thread nor a
database connection.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Body, Path, Query, Router
from pydantic import Field

from sagaboard.access.api.caller import caller_token
from sagaboard.actions.services import decisions
from sagaboard.api import links
from sagaboard.api.errors import ERRORS
from sagaboard.api.event_schema import Text
from sagaboard.api.schemas import Out, StrictSchema, free_text
from sagaboard.infra.http.limits import BIGINT
from sagaboard.models.fields import ApprovalStatus, CarriedOut, StepAction
from undo_core import StepState

router = Router(tags=["decisions"])

WAIT = Query(
    0.0,
    ge=0,
    le=decisions.MAX_WAIT,
    description="seconds to hold the request while nothing is decided (0..30)",
)


class ApprovalAskIn(StrictSchema):
    why: free_text(2000) | None = None  # type: ignore[valid-type]


class ApprovalOut(Out):
    id: int
    saga_id: str
    step_id: str
    status: ApprovalStatus
    required: int
    why: str
    decided_reason: str
    decided_by: list[str]
    plan_hash: str
    created_at: datetime
    expires_at: datetime | None
    decided_at: datetime | None


class ApprovalRuleOut(Out):
    needed: bool
    why: str | None


class DecisionOut(Out):
    action: StepAction | None  # type: ignore[valid-type]
    by: str | None
    reason: str | None
    at: str | None
    state: StepState


class AckIn(StrictSchema):
    action: CarriedOut  # type: ignore[valid-type]
    at: Text | None = Field(default=None, max_length=64)


class AckOut(Out):
    acknowledged: CarriedOut  # type: ignore[valid-type]
    by: str | None
    reason: str | None
    at: str | None
    state: StepState


@router.get(
    "/sagas/{saga_id}/steps/{step_id}/approval-rule",
    response={200: ApprovalRuleOut, **ERRORS},
    summary="Does sagaboard want approval for this step's undo?",
)
def approval_rule(request: HttpRequest, saga_id: Text, step_id: Text) -> dict[str, Any]:
    """``{"needed", "why"}`` from the project's policies (and command undos)."""
    project = caller_token(request).project
    return decisions.approval_rule(project=project, saga_id=saga_id, step_id=step_id)


@router.post(
    "/sagas/{saga_id}/steps/{step_id}/approval",
    response={200: ApprovalOut, **ERRORS},
    summary="Ask for approval of a step's undo",
    openapi_extra=links.REQUEST_APPROVAL,
)
def request_approval(
    request: HttpRequest, saga_id: Text, step_id: Text, payload: Body[ApprovalAskIn | None] = None
) -> dict[str, Any]:
    """The approval for this step's undo: the current one, or a new PENDING one.

    The step must be mirrored already (flush the store first).
    """
    approval = decisions.approval_request(
        project=caller_token(request).project,
        saga_id=saga_id,
        step_id=step_id,
        why=payload.why if payload is not None else None,
    )
    return decisions.approval_view(approval)


@router.get(
    "/approvals/{approval_id}",
    response={200: ApprovalOut, **ERRORS},
    summary="Read (or wait for) an approval",
)
async def get_approval(
    request: HttpRequest, approval_id: int = Path(..., ge=1, le=BIGINT), wait: float = WAIT
) -> Any:
    """The approval; while PENDING, held up to ``wait`` seconds for a decision."""
    return await decisions.approval_wait(
        project=caller_token(request).project, approval_id=approval_id, wait=wait
    )


@router.get(
    "/sagas/{saga_id}/steps/{step_id}/decision",
    response={200: DecisionOut, **ERRORS},
    summary="Read (or wait for) an operator's decision on a failed undo",
)
async def get_decision(
    request: HttpRequest, saga_id: Text, step_id: Text, wait: float = WAIT
) -> Any:
    """retry, resolve or leave, with who and why; ``action: null`` if nothing after ``wait``."""
    return await decisions.decision_wait(
        project=caller_token(request).project, saga_id=saga_id, step_id=step_id, wait=wait
    )


@router.post(
    "/sagas/{saga_id}/steps/{step_id}/decision/ack",
    response={200: AckOut, **ERRORS},
    summary="Acknowledge an operator's retry or resolve, once carried out",
)
def ack_decision(request: HttpRequest, saga_id: Text, step_id: Text, payload: AckIn) -> Any:
    """Clear the pending request, if it is still ``action`` (and ``at``, if given); else 409."""
    token = caller_token(request)
    return decisions.decision_ack(
        project=token.project,
        token=token,
        saga_id=saga_id,
        step_id=step_id,
        action=payload.action,
        at=payload.at,
    )

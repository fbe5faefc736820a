"""Decisions for sagas the agent runs itself: approvals to wait for, operators' actions to do.

A saga mirrored from an agent (``driver=client``) is rolled back *in the agent*,
by undo_core's engine, whose gate (``undo_core.remote.SagaboardGate``) asks
sagaboard. The rules are the ones server-run sagas follow:

- An undo that needs approval gets the step's current approval (one per step
  and plan, ``approvals.approval_open``); people decide it in the dashboard.
  A token can ask and wait, never decide.
- An operator's retry or resolve on a failed undo is a ``Step.pending_action``
  (``operations.step_act``); the agent polls for it, carries it out with its
  engine, posts the transition events, then acknowledges it here, which
  clears it (only if it is still the same request). "Leave it failed" is
  immediate (``Step.left_at``) and needs no acknowledgement.

Waiting is a bounded long-poll (at most ``MAX_WAIT`` seconds): the database is
read every ``POLL_SECONDS`` and the connection is given back between reads, so
a waiting agent holds neither a thread nor a database connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection, transaction

from sagaboard.actions.services import batch_outcomes
from sagaboard.approvals.services import approvals
from sagaboard.audit.services import audit
from sagaboard.errors import ServiceError
from sagaboard.models import ApiToken, Approval, ApprovalVote, Project, Saga, Step
from undo_core import CARRIED_OUT, StepState

MAX_WAIT = 30.0
"""The longest a long-poll is held, in seconds."""
POLL_SECONDS = 0.25
"""How often a long-poll reads the database."""

ASKABLE = frozenset({StepState.COMPLETED, StepState.AWAITING_APPROVAL})
"""Step states in which an agent may ask for approval (COMPLETED: its move is still in flight)."""
SETTLED = frozenset(
    {StepState.ROLLED_BACK, StepState.RESOLVED, StepState.REJECTED, StepState.FAILED}
)
"""Step states no operator can act on any more: nothing to wait for."""
ACKNOWLEDGEABLE = CARRIED_OUT
"""What an agent acknowledges having carried out (undo_core's ``CARRIED_OUT``)."""

# ---------------------------------------------------------------- finding things


def _step(project: Project, saga_id: str, step_id: str) -> Step:
    """The step of a saga the agent runs, in this project; 404 / 409 otherwise."""
    saga = Saga.objects.filter(project=project, saga_id=saga_id).select_related("project").first()
    if saga is None:
        raise ServiceError(404, "not_found", f"no saga {saga_id!r} in this project", "saga_id")
    step = Step.objects.filter(saga=saga, step_id=step_id).first()
    if step is None:
        raise ServiceError(
            404,
            "not_found",
            f"no step {step_id!r} in saga {saga_id!r}: post its events first (flush the store)",
            "step_id",
        )
    if saga.driver != Saga.Driver.CLIENT:
        raise ServiceError(
            409,
            "server_driven",
            f"saga {saga_id!r} is run by sagaboard: its workers ask for decisions and carry "
            "them out, not the agent",
        )
    step.saga = saga
    return step


def _approval(project: Project, approval_id: int) -> Approval:
    approval = (
        Approval.objects.filter(pk=approval_id, project=project)
        .select_related("saga", "step")
        .first()
    )
    if approval is None:
        raise ServiceError(
            404, "not_found", f"no approval {approval_id} in this project", "approval_id"
        )
    return approval


# ---------------------------------------------------------------- approvals


def approval_request(*, project: Project, saga_id: str, step_id: str, why: str | None) -> Approval:
    """The approval that governs this step's undo now; a new PENDING one if there is none.

    As often as the agent likes (a retried request, a resumed rollback): the
    same step and plan get the same approval back.
    """
    step = _step(project, saga_id, step_id)
    if step.state not in ASKABLE:
        raise ServiceError(
            409,
            "illegal_state",
            f"step {step_id!r} is {step.state}: only an undo about to run (AWAITING_APPROVAL) "
            "can be approved",
            "step_id",
        )
    reason = (
        (why or "").strip()
        or approvals.approval_reason(project, step)
        or "the agent asked for approval before this undo runs"
    )
    return approvals.approval_open(step.saga, step, reason)


def approval_rule(*, project: Project, saga_id: str, step_id: str) -> dict[str, Any]:
    """Whether sagaboard's rules (its policies, a command undo) want a person for this undo.

    Asked by the agent's gate before an undo its own process would run unattended,
    so the admins' policies hold for sagas the agent runs too.
    """
    why = approvals.approval_reason(project, _step(project, saga_id, step_id))
    return {"needed": why is not None, "why": why}


def approval_view(approval: Approval) -> dict[str, Any]:
    """An approval as the API shows it. ``decided_by``: who voted for how it stands."""
    wanted = (
        ApprovalVote.Decision.REJECT
        if approval.status == Approval.Status.REJECTED
        else ApprovalVote.Decision.APPROVE
    )
    votes = approval.votes.filter(decision=wanted).select_related("user").order_by("at", "pk")
    return {
        "id": approval.pk,
        "saga_id": approval.saga.saga_id,
        "step_id": approval.step.step_id,
        "status": approval.status,
        "required": approval.required,
        "why": approval.why,
        "decided_reason": approval.decided_reason,
        "decided_by": [v.user.get_username() for v in votes],
        "plan_hash": approval.plan_hash,
        "created_at": approval.created_at,
        "expires_at": approval.expires_at,
        "decided_at": approval.decided_at,
    }


def approval_get(*, project: Project, approval_id: int) -> dict[str, Any]:
    return approval_view(_approval(project, approval_id))


async def approval_wait(*, project: Project, approval_id: int, wait: float) -> dict[str, Any]:
    """The approval once it is no longer PENDING, or as it is after ``wait`` seconds."""
    return await _long_poll(
        lambda: approval_get(project=project, approval_id=approval_id),
        lambda view: view["status"] != Approval.Status.PENDING,
        wait,
    )


# ---------------------------------------------------------------- operators' actions


def decision_view(step: Step) -> dict[str, Any]:
    """What an operator decided for this failed undo, if anything: retry, resolve or leave."""
    if step.left_at is not None:
        action: dict[str, Any] = {
            "action": "leave",
            "by": step.left_by,
            "reason": step.left_reason,
            "at": step.left_at.isoformat(),
        }
    elif step.pending_action:
        p = step.pending_action
        action = {k: p.get(k) for k in ("action", "by", "reason", "at")}
    else:
        action = {"action": None, "by": None, "reason": None, "at": None}
    return {**action, "state": step.state}


def decision_get(*, project: Project, saga_id: str, step_id: str) -> dict[str, Any]:
    return decision_view(_step(project, saga_id, step_id))


async def decision_wait(
    *, project: Project, saga_id: str, step_id: str, wait: float
) -> dict[str, Any]:
    """The operator's decision once there is one (or the step is settled), else after ``wait``."""
    return await _long_poll(
        lambda: decision_get(project=project, saga_id=saga_id, step_id=step_id),
        lambda view: view["action"] is not None or view["state"] in SETTLED,
        wait,
    )


def decision_ack(
    *,
    project: Project,
    token: ApiToken | None,
    saga_id: str,
    step_id: str,
    action: str,
    at: str | None = None,
) -> dict[str, Any]:
    """The agent carried out the pending ``action``: clear it, if it is still that request.

    Conditional under a row lock: an acknowledgement that arrives twice, or
    after the request changed, is refused (409) and changes nothing.
    """
    if action not in ACKNOWLEDGEABLE:
        raise ServiceError(422, "validation_error", "action must be retry or resolve", "action")
    step = _step(project, saga_id, step_id)
    with transaction.atomic():
        locked = Step.objects.select_for_update().get(pk=step.pk)
        pending = locked.pending_action or {}
        if not pending:
            raise ServiceError(
                409, "not_pending", f"no {action} is pending on step {step_id!r}: nothing to clear"
            )
        if pending.get("action") != action or (at is not None and pending.get("at") != at):
            raise ServiceError(
                409,
                "not_pending",
                f"the pending request on step {step_id!r} is {pending.get('action')} by "
                f"{pending.get('by')} at {pending.get('at')}, not the {action} acknowledged",
            )
        Step.objects.filter(pk=step.pk).update(pending_action=None)
        audit.record(
            user=None,
            actor=f"token:{token.prefix}" if token is not None else "agent",
            action=f"step.{action}.done",
            saga=step.saga,
            step=locked,
            reason=str(pending.get("reason") or ""),
            from_state=f"{action.upper()}_REQUESTED",
            to_state=locked.state,
            data={"requested_by": pending.get("by"), "requested_at": pending.get("at")},
        )
    # The step is what the agent made of the request: a batch job's item for it gets that
    # outcome now (after the commit: the step's lock is not held while waiting for the job's).
    batch_outcomes.requests_settle(step_pks=[step.pk], carried_out=True)
    view = {k: pending.get(k) for k in ("by", "reason", "at")}
    return {"acknowledged": action, **view, "state": locked.state}


# ---------------------------------------------------------------- long-polling


def _released[T](read: Callable[[], T]) -> Callable[[], T]:
    """``read``, then give the database connection back (to its pool, or closed).

    Not inside a transaction (a test's): closing there would end it.
    """

    def run() -> T:
        try:
            return read()
        finally:
            if not connection.in_atomic_block:
                connection.close()

    return run


async def _long_poll(
    read: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool], wait: float
) -> dict[str, Any]:
    wait = min(max(wait, 0.0), MAX_WAIT)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    fetch = sync_to_async(_released(read))
    view = await fetch()
    while not done(view):
        left = deadline - loop.time()
        if left <= 0:
            break
        await asyncio.sleep(min(POLL_SECONDS, left))
        view = await fetch()
    return view

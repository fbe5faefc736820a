"""An operator's answer to a failed undo: retry it, force-resolve it, or leave it failed.

Asking is one conditional UPDATE on the step (state still ROLLBACK_FAILED or
IN_DOUBT, no action pending, not left): a double click, two operators at once,
or a retry while an attempt runs each leave exactly one request, and the
others are told why not. The request is then carried out by whoever runs the
saga: a worker for sagas sagaboard runs, the agent's SDK for sagas it runs
itself (it polls for the decision). Leaving a step failed is immediate.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from sagaboard.access.reads import visible
from sagaboard.actions.services import batch_outcomes
from sagaboard.approvals.services import approvals
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.audit.services import audit
from sagaboard.engine.reads import rollback_outcomes
from sagaboard.engine.services import undo_kinds
from sagaboard.infra import jobs
from sagaboard.models import Approval, Saga, Step, User
from undo_core import STEP_ACTIONS, DecisionAction, StepState

ACTIONABLE = [StepState.ROLLBACK_FAILED, StepState.IN_DOUBT]
PERMISSION: dict[str, str] = {
    DecisionAction.RETRY: "sagaboard.retry_compensation",
    DecisionAction.RESOLVE: "sagaboard.resolve_step",
    DecisionAction.LEAVE: "sagaboard.resolve_step",
}
"""The permission each of undo_core's ``STEP_ACTIONS`` needs (the one map; batches reuse it)."""
assert tuple(PERMISSION) == STEP_ACTIONS
_NEEDS_REASON = (DecisionAction.RESOLVE, DecisionAction.LEAVE)
"""Step actions taken on a person's word alone: they must say why (a retry may not)."""
_NAMES = f"{', '.join(STEP_ACTIONS[:-1])} or {STEP_ACTIONS[-1]}"

_MOOT: dict[str, str] = {
    DecisionAction.LEAVE: "the step was left failed",
    DecisionAction.RESOLVE: "the step was resolved by hand",
}
"""Why a retry's pending approval is void once the step is left or resolved instead."""


def step_act(*, step_pk: int, user: User, action: str, reason: str) -> Step:
    """Ask for ``action`` (retry, resolve, leave) on a failed undo; ``DecisionRefused`` if not."""
    reason = (reason or "").strip()
    if action not in PERMISSION:
        raise DecisionRefused("validation_error", f"action must be {_NAMES}", "action")
    if action in _NEEDS_REASON and not reason:
        raise DecisionRefused("validation_error", "a reason is required", "reason")
    if not user.has_perm(PERMISSION[action]):
        raise DecisionRefused("forbidden", f"{action} needs the operator role")
    projects = visible.projects_for_user(user)
    with transaction.atomic():
        step = (
            Step.objects.select_related("saga__project")
            .filter(pk=step_pk, saga__project__in=projects)
            .first()
        )
        if step is None:
            raise DecisionRefused("not_found", "no such step in your projects")
        now = timezone.now()
        needs = _retry_check(step, now) if action == "retry" else None
        # A resolve or leave takes over a retry that waits for its approval (and voids it).
        waiting = approvals.retry_waits_on(step) if action != "retry" else None
        claimable = Step.objects.filter(
            pk=step.pk, state__in=ACTIONABLE, left_at__isnull=True
        ).filter(
            Q(pending_action=step.pending_action) if waiting else Q(pending_action__isnull=True)
        )
        actor = audit.actor_of(user)
        if action == "leave":
            won = claimable.update(
                left_at=now, left_by=actor, left_reason=reason, pending_action=None
            )
        else:
            request = {"action": action, "by": actor, "reason": reason, "at": now.isoformat()}
            if needs:  # said now; the worker opens the approval (and checks again)
                request["needs_approval"] = needs
            won = claimable.update(pending_action=request)
        if not won:
            raise DecisionRefused("already_decided", _why_not(step.pk))
        if waiting:
            approvals.approval_void(waiting, reason=_MOOT[action], user=user)
        if action == "leave" or waiting:  # the saga no longer waits for that approver
            rollback_outcomes.refresh(Saga.objects.select_for_update().get(pk=step.saga_id))
        audit.record(
            user=user,
            action=f"step.{action}",
            saga=step.saga,
            step=step,
            reason=reason,
            from_state=step.state,
            to_state="LEFT" if action == "leave" else f"{action.upper()}_REQUESTED",
        )
    step.refresh_from_db()
    if action != "leave" and step.saga.driver == Saga.Driver.SERVER:
        jobs.step_action_run(step.pk)
    elif waiting:  # the left step's retry item (a batch job's) is skipped now
        batch_outcomes.requests_settle(step_pks=[step.pk], carried_out=True)
    return step


def _retry_check(step: Step, now: datetime) -> str | None:
    """Refuse a retry that cannot run; for one that must wait for an approver, say why.

    The worker's rules, asked at the request (``runner.step_action_run`` asks again): an
    undo nothing here can run could only fail again; one an approver rejected for what
    would run is not run on a retry (resolve or leave it); one that needs approval with
    none standing waits for the approver (sagas sagaboard runs: their worker asks).
    """
    saga = step.saga
    if step.retry_waits_for_approval:
        raise DecisionRefused("already_decided", _why_not(step.pk))
    refused = undo_kinds.retry_refused(saga, step, now)
    if refused:  # it could only fail again
        raise DecisionRefused("cannot_run_here", f"a retry cannot run this undo: {refused}")
    if saga.driver != Saga.Driver.SERVER or step.pending_action:
        return None
    rejected = approvals.retry_rejection(saga, step)
    if rejected is not None:
        raise DecisionRefused("already_decided", _rejected(rejected))
    return approvals.retry_approval_needed(saga, step)


def _rejected(approval: Approval) -> str:
    said = approval.decided_reason or approval.status.lower()
    return (
        f"an approver rejected this undo (approval #{approval.pk}: {said}): "
        "force-resolve it or leave it failed"
    )


def retry_refused(
    saga: Saga, step: Step, current: Approval | None, now: datetime | None = None
) -> str:
    """Why the pages offer no retry of this failed undo ('' when they do): what ``step_act``
    would refuse it by, in its words (``undo_kinds.retry_refused``, or an approver's
    rejection of exactly what it would run). ``current``: the step's approval that stands
    (``approvals.approvals_current``, read once for all of a page's steps)."""
    refused = undo_kinds.retry_refused(saga, step, now)
    if refused or not step.needs_operator:
        return refused
    if saga.driver != Saga.Driver.SERVER or step.pending_action:
        return ""
    rejected = approvals.rejection_standing(saga, step, current)
    return _rejected(rejected) if rejected is not None else ""


def _why_not(step_pk: int) -> str:
    step = Step.objects.get(pk=step_pk)
    if step.pending_action:
        p = step.pending_action
        said = f"already requested: {p.get('action')} by {p.get('by')} at {p.get('at')}"
        if approvals.retry_waits_on(step):
            said += f"; it waits for approval #{p['approval']} ({p.get('why')})"
        return said
    if step.left_at is not None:
        return f"already left failed by {step.left_by}: {step.left_reason}"
    if step.state == StepState.COMPENSATING:
        return "an undo attempt is running right now: wait for its outcome"
    return f"already settled: the step is {step.state}" + (
        f" (by {step.decided_by})" if step.decided_by else ""
    )


def steps_act_many(
    *, step_pks: Iterable[int], user: User, action: str, reason: str
) -> list[tuple[int, Step | DecisionRefused]]:
    """Bulk retry / resolve / leave: each step handled (or refused) on its own."""
    results: list[tuple[int, Step | DecisionRefused]] = []
    for pk in step_pks:
        try:
            results.append((pk, step_act(step_pk=pk, user=user, action=action, reason=reason)))
        except DecisionRefused as refused:
            results.append((pk, refused))
    return results

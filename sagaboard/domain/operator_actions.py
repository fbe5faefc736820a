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
from typing import Any

from django.db import transaction
from django.utils import timezone

from sagaboard.domain import audit, jobs
from sagaboard.domain.approvals import DecisionRefused
from sagaboard.models import Saga, Step
from sagaboard.selectors import rollback_outcomes, visible
from undo_core import StepState

ACTIONABLE = [StepState.ROLLBACK_FAILED, StepState.IN_DOUBT]
PERMISSION = {
    "retry": "sagaboard.retry_compensation",
    "resolve": "sagaboard.resolve_step",
    "leave": "sagaboard.resolve_step",
}


def step_act(*, step_pk: int, user: Any, action: str, reason: str) -> Step:
    """Ask for ``action`` (retry, resolve, leave) on a failed undo; ``DecisionRefused`` if not."""
    reason = (reason or "").strip()
    if action not in PERMISSION:
        raise DecisionRefused(
            "validation_error", "action must be retry, resolve or leave", "action"
        )
    if action in ("resolve", "leave") and not reason:
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
        claimable = Step.objects.filter(
            pk=step.pk, state__in=ACTIONABLE, pending_action__isnull=True, left_at__isnull=True
        )
        actor = audit.actor_of(user)
        if action == "leave":
            won = claimable.update(left_at=now, left_by=actor, left_reason=reason)
            if won:  # no longer waits for anyone: the saga's outcome says "left failed"
                rollback_outcomes.refresh(Saga.objects.select_for_update().get(pk=step.saga_id))
        else:
            request = {"action": action, "by": actor, "reason": reason, "at": now.isoformat()}
            won = claimable.update(pending_action=request)
        if not won:
            raise DecisionRefused("already_decided", _why_not(step.pk))
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
    return step


def _why_not(step_pk: int) -> str:
    step = Step.objects.get(pk=step_pk)
    if step.pending_action:
        p = step.pending_action
        return f"already requested: {p.get('action')} by {p.get('by')} at {p.get('at')}"
    if step.left_at is not None:
        return f"already left failed by {step.left_by}: {step.left_reason}"
    if step.state == StepState.COMPENSATING:
        return "an undo attempt is running right now: wait for its outcome"
    return f"already settled: the step is {step.state}" + (
        f" (by {step.decided_by})" if step.decided_by else ""
    )


def steps_act_many(
    *, step_pks: Iterable[int], user: Any, action: str, reason: str
) -> list[tuple[int, Step | DecisionRefused]]:
    """Bulk retry / resolve / leave: each step handled (or refused) on its own."""
    results: list[tuple[int, Step | DecisionRefused]] = []
    for pk in step_pks:
        try:
            results.append((pk, step_act(step_pk=pk, user=user, action=action, reason=reason)))
        except DecisionRefused as refused:
            results.append((pk, refused))
    return results

"""Approvals: which undos need a person, and deciding each exactly once.

Rules in one place, for every path that asks (the worker's gate, the API the
SDK calls, the pages):

- An undo needs approval when its step says so (the tool's or the API's
  ``requires_approval``), when it is a shell command, or when an enabled
  policy of the project matches (tool glob and condition). The policy that
  applied is copied onto the approval: later edits do not change it.
- An approval binds to the hash of exactly what will run; if that changes,
  the approval is void and a new one is asked for.
- A decision is taken under a row lock on the approval: two approvers at the
  same instant, a double click, or an approval racing its expiry each end with
  one decision, and the loser is told "already decided".
- The agent's token cannot decide (the API has no such call), and neither can
  the person who made the token that posted the saga; with four eyes, the
  second approval must come from someone else.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any, ClassVar

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from sagaboard.access.reads import visible
from sagaboard.approvals.services import conditions
from sagaboard.audit.services import audit
from sagaboard.engine.services.undo_kinds import plan_for, plan_hash
from sagaboard.errors import ServiceError
from sagaboard.infra import jobs
from sagaboard.models import Approval, ApprovalPolicy, ApprovalVote, Project, Saga, Step, User
from sagaboard.notify.services import notifications
from undo_core import SagaStatus, StepState

Status = Approval.Status


DECIDE_PERMISSION = "sagaboard.decide_approval"
"""What deciding an approval needs (each of undo_core's ``APPROVAL_DECISIONS``)."""


class DecisionRefused(ServiceError):
    """A decision that was not taken; ``message`` is for the person who tried."""

    STATUS: ClassVar[dict[str, int]] = {
        "validation_error": 400,
        "forbidden": 403,
        "not_found": 404,
        "already_decided": 409,
        "void": 409,
        "cannot_run_here": 409,
    }
    """The HTTP status of each refusal (a form's bad value is 400: the page, not an API)."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(self.STATUS.get(code, 400), code, message, field)


# ---------------------------------------------------------------- who must decide


def policies_enabled(project: Project) -> list[ApprovalPolicy]:
    return list(ApprovalPolicy.objects.filter(project=project, enabled=True))


def policy_for(
    project: Project, step: Step, policies: Sequence[ApprovalPolicy] | None = None
) -> ApprovalPolicy | None:
    """The enabled policy that applies to this step: the most demanding of those matching.

    ``policies``: the project's enabled policies, when the caller asks about many steps.
    """
    matching = [
        p
        for p in (policies_enabled(project) if policies is None else policies)
        if fnmatchcase(step.tool_name, p.tool_glob)
        and conditions.matches(p.condition, input=step.input, output=step.output)
    ]
    return max(matching, key=lambda p: (p.approvers_required, p.pk), default=None)


def approval_reason(
    project: Project, step: Step, policies: Sequence[ApprovalPolicy] | None = None
) -> str | None:
    """Why this step's undo needs a person, or None when it may run unattended."""
    if (step.undo or {}).get("kind") == "command":
        return "a shell-command undo always needs approval"
    if step.requires_approval:
        return "the tool or the step was declared as needing approval"
    policy = policy_for(project, step, policies)
    if policy is not None:
        return f"policy {policy.name!r} (v{policy.version}) matched"
    return None


def _policy_snapshot(policy: ApprovalPolicy | None) -> dict[str, Any]:
    if policy is None:
        return {}
    return {
        "id": policy.pk,
        "name": policy.name,
        "version": policy.version,
        "tool_glob": policy.tool_glob,
        "condition": policy.condition,
        "approvers_required": policy.approvers_required,
        "timeout_seconds": policy.timeout_seconds,
        "on_expiry": policy.on_expiry,
    }


def approval_current(step: Step) -> Approval | None:
    """The step's latest approval that is not void (the one that stands, if any)."""
    return step.approvals.exclude(status=Status.VOID).order_by("-pk").first()


def approval_open(
    saga: Saga, step: Step, why: str, *, policies: Sequence[ApprovalPolicy] | None = None
) -> Approval:
    """The approval that governs this undo now: the current one, or a new PENDING one.

    Called by every asker (worker gate, SDK over the API) as often as they like.
    Voiding and creating happen under a lock on the step, so concurrent askers get
    the same approval. An approval that already stands for this plan (the worker
    coming back after the decision) is only read: a lock is a commit, and on
    PostgreSQL a commit waits for a disk flush. Reading it unlocked is what the
    locked path would answer too: nothing is written, and the undo checks again
    what stands right before it runs.
    ``policies``: the project's enabled policies, when the caller has them.
    """
    plan = plan_for(saga, step)
    digest = plan_hash(plan)
    current = approval_current(step)
    if current is not None and current.plan_hash == digest:
        return current
    created = False
    with transaction.atomic():
        Step.objects.select_for_update().filter(pk=step.pk).first()
        current = approval_current(step)
        if current is not None and current.plan_hash == digest:
            return current
        if current is not None and current.status in (Status.PENDING, Status.APPROVED):
            current.status, current.decided_at = Status.VOID, timezone.now()
            current.decided_reason = "what will run changed after approval was asked for"
            current.save(update_fields=["status", "decided_at", "decided_reason"])
            audit.record(
                user=None, actor="system", action="approval.void", saga=saga, step=step,
                reason=current.decided_reason, from_state=Status.PENDING, to_state=Status.VOID,
            )  # fmt: skip
        policy = policy_for(saga.project, step, policies)
        now = timezone.now()
        approval = Approval.objects.create(
            project=saga.project,
            saga=saga,
            step=step,
            required=policy.approvers_required if policy else 1,
            why=why,
            policy=policy,
            policy_snapshot=_policy_snapshot(policy),
            plan=plan,
            plan_hash=digest,
            created_at=now,
            expires_at=(
                now + timedelta(seconds=policy.timeout_seconds)
                if policy and policy.timeout_seconds
                else None
            ),
        )
        audit.record(
            user=None, actor="system", action="approval.requested", saga=saga, step=step,
            reason=why, to_state=Status.PENDING, data={"approval": approval.pk},
        )  # fmt: skip
        created = True
    if created:
        notifications.notify_approval(approval, "approval.created")
    return approval


# ---------------------------------------------------------------- deciding


@dataclass(frozen=True)
class Outcome:
    approval: Approval
    decided: bool
    """True when this vote settled the approval (approved or rejected)."""
    approvals: int = 0
    """The approve votes the approval holds now, this one included."""

    @property
    def progress(self) -> str:
        """A vote that did not settle it, in plain words (``approval_progress``)."""
        return approval_progress(self.approval, self.approvals)


def approval_progress(approval: Approval, approvals: int) -> str:
    """How far a four-eyes approval is: "1 of 2 approvals in; one more approver needed"."""
    more = max(approval.required - approvals, 0)
    needed = "one more approver needed" if more == 1 else f"{more} more approvers needed"
    return f"{approvals} of {approval.required} approvals in; {needed}"


def approval_decide(
    *, approval_id: int, user: User, decision: str, reason: str, via: str = "page"
) -> Outcome:
    """One person's approve or reject, taken exactly once; ``DecisionRefused`` says why not.

    ``via``: where the person decided (``page``, ``email``, ``slack``), kept in the audit
    entry; every way in goes through here, so the rules are the same everywhere.

    One transaction, its reads folded (the approver waits on them, and the undo
    after them): the approval, locked, with its saga, step and the saga's token in
    one query; the votes so far in another. Votes are only added under this lock,
    so that list is complete while it is held.
    """
    reason = (reason or "").strip()
    _refuse_unfit(user, decision, reason)
    projects = visible.projects_visible(user)
    void_error: DecisionRefused | None = None
    approved = 0
    with transaction.atomic():
        approval = _locked_for_decision(approval_id, projects)
        saga, step = approval.saga, approval.step
        votes = _votes_if_theirs_to_cast(approval, user)
        if plan_hash(plan_for(saga, step)) != approval.plan_hash:
            void_error = _void_changed(approval)
        else:
            approved = _vote(approval, user, decision, reason, votes=votes, via=via)
    if void_error is not None:
        raise void_error
    decided = approval.status != Status.PENDING
    if decided:
        _after_decision(approval, saga.driver, step)
    return Outcome(approval, decided, approved)


# The steps of ``approval_decide``, in its order: what is refused before anything is read,
# the locked read, who may not vote on it, then the vote (or the void). Each runs inside
# its transaction where it says so: a refusal there rolls back whatever came before.


def _refuse_unfit(user: User, decision: str, reason: str) -> None:
    """Refuse a decision that is not one, has no reason, or comes from a non-approver."""
    if decision not in ApprovalVote.Decision.values:
        raise DecisionRefused("validation_error", "decision must be approve or reject", "decision")
    if not reason:
        raise DecisionRefused("validation_error", "a reason is required", "reason")
    if not user.has_perm(DECIDE_PERMISSION):
        raise DecisionRefused("forbidden", "deciding undos needs the approver role")


def _locked_for_decision(approval_id: int, projects: QuerySet[Project]) -> Approval:
    """The approval, locked (in the caller's transaction), with its saga, step and the
    saga's token in one query; ``not_found`` outside ``projects``."""
    approval = (
        Approval.objects.select_for_update(of=("self",))
        .select_related("saga__project", "saga__posted_by_token", "step")
        .filter(pk=approval_id, project__in=projects)
        .first()
    )
    if approval is None:
        raise DecisionRefused("not_found", "no such approval in your projects")
    return approval


def _votes_if_theirs_to_cast(approval: Approval, user: User) -> list[tuple[int, str]]:
    """The votes so far, if ``user`` may vote now: not once it is decided, not by whoever
    made the token that posted the saga, not twice. Complete while the lock is held
    (votes are only added under it)."""
    if approval.status != Status.PENDING:
        raise DecisionRefused("already_decided", _already(approval))
    token = approval.saga.posted_by_token
    if token is not None and token.created_by_id == user.pk:
        raise DecisionRefused(
            "forbidden",
            f"you made the token ({token.prefix}) that posted this saga: "
            "someone else must decide its undos",
        )
    votes = list(approval.votes.values_list("user_id", "decision"))
    if any(voter == user.pk for voter, _ in votes):
        raise DecisionRefused(
            "already_decided",
            "you have already approved this undo: a second, different person must approve",
        )
    return votes


def _void_changed(approval: Approval) -> DecisionRefused:
    """Void the approval whose plan changed since it was asked for; the refusal to raise
    once the transaction has committed (the void must stay)."""
    approval.status, approval.decided_at = Status.VOID, timezone.now()
    approval.decided_reason = "what will run changed after approval was asked for"
    approval.save(update_fields=["status", "decided_at", "decided_reason"])
    return DecisionRefused(
        "void", "what will run changed since this approval was asked for: it is void"
    )


def _vote(
    approval: Approval,
    user: User,
    decision: str,
    reason: str,
    *,
    votes: list[tuple[int, str]],
    via: str,
) -> int:
    """Cast the vote, settle the approval if it decides it, audit it; the approve votes."""
    saga, step = approval.saga, approval.step
    ApprovalVote.objects.create(approval=approval, user=user, decision=decision, reason=reason)
    votes.append((user.pk, decision))
    approved = sum(1 for _, d in votes if d == ApprovalVote.Decision.APPROVE)
    _settle(approval, decision, reason, approved)
    audit.record(
        user=user,
        action=f"approval.{decision}",
        saga=saga,
        step=step,
        reason=reason,
        from_state=Status.PENDING,
        to_state=approval.status,
        data={"approval": approval.pk, "votes": len(votes), "via": via},
    )
    return approved


def _settle(approval: Approval, decision: str, reason: str, approvals: int) -> None:
    """Settle the approval if this vote decides it; ``approvals``: approve votes, this one too."""
    if decision == ApprovalVote.Decision.REJECT:
        approval.status = Status.REJECTED
    elif approvals >= approval.required:
        approval.status = Status.APPROVED
    else:
        return
    approval.decided_at, approval.decided_reason = timezone.now(), reason
    approval.save(update_fields=["status", "decided_at", "decided_reason"])


def _already(approval: Approval) -> str:
    votes = ", ".join(v.user.get_username() for v in approval.votes.select_related("user"))
    when = approval.decided_at.strftime("%Y-%m-%d %H:%M:%S UTC") if approval.decided_at else ""
    by = f" by {votes}" if votes else ""
    return f"already decided: {approval.status.lower()}{by} at {when}".strip()


def _after_decision(approval: Approval, driver: str, step: Step | None = None) -> None:
    """A settled approval lets the saga's rollback go on (server-run sagas: a worker).

    An approval an operator's retry waits for (``retry_waits_on``) is that retry's: the
    worker carries the retry out (approved) or ends it (rejected, expired), then goes on.
    ``step``: the approval's step when the caller has read it (under the decision's lock).
    """
    if driver != Saga.Driver.SERVER:
        return
    step = step or Step.objects.filter(pk=approval.step_id).first()
    if step is not None and retry_waits_on(step) == approval.pk:
        jobs.step_action_run(step.pk)
    else:
        jobs.rollback_continue(approval.saga_id)


# ---------------------------------------------------------------- a retry's approval


def retry_waits_on(step: Step) -> int | None:
    """The approval an operator's pending retry of this step waits for, if it waits for one.

    Set on the request (``Step.pending_action["approval"]``) by the worker that found the
    retry needs approval and none stands (``runner.step_action_run``); no query.
    """
    request = step.pending_action or {}
    if request.get("action") != "retry" or not request.get("approval"):
        return None
    return int(request["approval"])


def retry_approval_needed(saga: Saga, step: Step) -> str | None:
    """Why a retry of this failed undo must wait for a person, or None when it may run now.

    The worker's rule (``runner._approved_hash``): an undo that needs approval runs only on
    an APPROVED approval that stands for exactly what would run.
    """
    why = approval_reason(saga.project, step)
    if why is None:
        return None
    current = approval_current(step)
    if current is None or current.status != Status.APPROVED:
        return why
    return None if current.plan_hash == plan_hash(plan_for(saga, step)) else why


def retry_rejection(saga: Saga, step: Step) -> Approval | None:
    """The rejected (or expired) approval that stands for what a retry would run, if any:
    an approver said no to this undo, so a retry is refused (resolve or leave it)."""
    return rejection_standing(saga, step, approval_current(step))


def rejection_standing(saga: Saga, step: Step, current: Approval | None) -> Approval | None:
    """``retry_rejection`` from the step's approval that stands (``current``, as
    ``approval_current`` reads it), for a caller that read it already."""
    if current is None or current.status not in (Status.REJECTED, Status.EXPIRED):
        return None
    return current if current.plan_hash == plan_hash(plan_for(saga, step)) else None


def approvals_current(step_pks: Iterable[int]) -> dict[int, Approval]:
    """Each step's approval that stands (``approval_current``), for many steps in one query."""
    current: dict[int, Approval] = {}
    pks = list(step_pks)
    if pks:
        for a in Approval.objects.filter(step__in=pks).exclude(status=Status.VOID).order_by("pk"):
            current[a.step_id] = a
    return current


def approval_void(approval_pk: int, *, reason: str, user: User | None = None) -> bool:
    """Void a PENDING approval (its undo will not run on it), audited; False if not pending.

    Runs inside the caller's transaction when there is one (with the change that made the
    approval moot), so the approval and that change are stored together or not at all.
    """
    with transaction.atomic():
        approval = (
            Approval.objects.select_for_update(of=("self",))
            .select_related("saga", "step")
            .filter(pk=approval_pk, status=Status.PENDING)
            .first()
        )
        if approval is None:
            return False
        approval.status, approval.decided_at = Status.VOID, timezone.now()
        approval.decided_reason = reason
        approval.save(update_fields=["status", "decided_at", "decided_reason"])
        audit.record(
            user=user, actor=None if user is not None else "system", action="approval.void",
            saga=approval.saga, step=approval.step, reason=reason, from_state=Status.PENDING,
            to_state=Status.VOID, data={"approval": approval.pk},
        )  # fmt: skip
    return True


_MOOT = (StepState.ROLLED_BACK, StepState.RESOLVED, StepState.REJECTED)
"""Step states whose undo has settled: a pending approval of one is for nothing."""


def approvals_void_settled(saga_pk: int | None = None) -> int:
    """Void the pending approvals left on steps that settled (undone, resolved, rejected,
    left failed) or whose saga's rollback ended; returns how many.

    The approval queue never shows an approval whose undo can no longer run. ``saga_pk``:
    that saga's only (after a worker's task), else every project's (the sweep).
    """
    pending = Approval.objects.filter(status=Status.PENDING)
    if saga_pk is not None:
        pending = pending.filter(saga_id=saga_pk)
    moot = (
        pending.filter(step__state__in=_MOOT)
        | pending.filter(step__left_at__isnull=False)
        | pending.filter(saga__status=SagaStatus.ROLLED_BACK)
    )
    voided = 0
    for pk, state, left in moot.values_list("pk", "step__state", "step__left_at")[:500]:
        why = "the step was left failed" if left else f"the step settled: {state}"
        if state == StepState.RESOLVED:
            why = "the step was resolved by hand"
        elif state not in _MOOT and left is None:
            why = "the saga's rollback ended"
        voided += approval_void(pk, reason=why)
    return voided


def approvals_decide_many(
    *, approval_ids: Iterable[int], user: User, decision: str, reason: str
) -> list[tuple[int, Outcome | DecisionRefused]]:
    """Bulk approve or reject with one reason; each item decided (or refused) on its own."""
    results: list[tuple[int, Outcome | DecisionRefused]] = []
    for pk in approval_ids:
        try:
            results.append(
                (pk, approval_decide(approval_id=pk, user=user, decision=decision, reason=reason))
            )
        except DecisionRefused as refused:
            results.append((pk, refused))
    return results


# ---------------------------------------------------------------- expiry


def approvals_expire(*, now: datetime | None = None) -> int:
    """Escalate approvals past their timeout; reject them where the policy says so.

    Each approval is handled under its own row lock, so an approver's click
    racing the expiry yields exactly one outcome. Returns how many were handled.
    """
    now = now or timezone.now()
    due = list(
        Approval.objects.filter(
            status=Status.PENDING, expires_at__lte=now, escalated_at__isnull=True
        ).values_list("pk", flat=True)[:500]
    )
    handled = 0
    for pk in due:
        with transaction.atomic():
            approval = Approval.objects.select_for_update().filter(pk=pk).first()
            if approval is None or approval.status != Status.PENDING or approval.escalated_at:
                continue  # decided meanwhile: the decision stands
            saga = Saga.objects.select_related("project").get(pk=approval.saga_id)
            step = Step.objects.get(pk=approval.step_id)
            approval.escalated_at = now
            reject = approval.policy_snapshot.get("on_expiry") == ApprovalPolicy.OnExpiry.REJECT
            waited = approval.policy_snapshot.get("timeout_seconds")
            why = f"no decision within {waited} s (policy {approval.policy_snapshot.get('name')!r})"
            if reject:
                approval.status, approval.decided_at = Status.EXPIRED, now
                approval.decided_reason = f"{why}: rejected automatically"
            approval.save(update_fields=["escalated_at", "status", "decided_at", "decided_reason"])
            audit.record(
                user=None, actor="system",
                action="approval.expired" if reject else "approval.escalated",
                saga=saga, step=step, reason=approval.decided_reason or f"{why}: still waiting",
                from_state=Status.PENDING, to_state=approval.status,
                data={"approval": approval.pk},
            )  # fmt: skip
            handled += 1
        notifications.notify_approval(approval, "approval.expired")
        if reject:
            _after_decision(approval, saga.driver)
    return handled

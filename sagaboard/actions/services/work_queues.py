"""The people's work queues: approvals awaiting a decision, failed undos awaiting an operator.

Reads, scoped like every read (only the caller's projects), that also say what each
item would do: whether its undo can run here and what a rollback's plan holds. Those
answers are rules (``undo_kinds.undo_route``, the approval policies), so the queues
live with the rules rather than among the plain reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from sagaboard.actions.services.operator_actions import retry_refused
from sagaboard.approvals.services.approvals import (
    approval_reason,
    approvals_current,
    policies_enabled,
)
from sagaboard.engine.reads import rollback_outcomes
from sagaboard.engine.services.undo_kinds import UndoRunner, plan_for, undo_route
from sagaboard.models import Approval, ApprovalVote, CompensationAttempt, Project, Saga, Step
from undo_core import StepState

QUEUE_LIMIT = 200


def _approvals(projects: Sequence[Project]) -> QuerySet[Approval]:
    return (
        Approval.objects.filter(project__in=projects)
        .select_related("saga__project", "step")
        .prefetch_related(Prefetch("votes", queryset=ApprovalVote.objects.select_related("user")))
    )


def approvals_pending(projects: Sequence[Project], *, limit: int = QUEUE_LIMIT) -> list[Approval]:
    """Pending approvals, oldest first (the one that has waited longest is on top)."""
    rows = _approvals(projects).filter(status=Approval.Status.PENDING).order_by("created_at", "pk")
    approvals = list(rows[:limit])
    _attach_failed_steps(approvals)
    return approvals


def approval_shown(projects: Sequence[Project], pk: int) -> Approval | None:
    """One approval, as the queue shows it (whatever its status), if it is in ``projects``."""
    approval = _approvals(projects).filter(pk=pk).first()
    if approval is not None:
        _attach_failed_steps([approval])
    return approval


def approvals_pending_count(projects: Sequence[Project]) -> int:
    """Every pending approval of ``projects`` (the queue shows the oldest ``QUEUE_LIMIT``)."""
    return Approval.objects.filter(project__in=projects, status=Approval.Status.PENDING).count()


def failures_open_count(projects: Sequence[Project]) -> int:
    """Every failed undo of ``projects`` waiting for an operator (the page shows at most
    ``QUEUE_LIMIT``)."""
    return Step.objects.filter(
        rollback_outcomes.waits_for_operator(), saga__project__in=projects
    ).count()


def approvals_for_step(projects: Sequence[Project], saga_pk: int, step_id: str) -> list[Approval]:
    approvals = list(
        _approvals(projects).filter(saga_id=saga_pk, step__step_id=step_id).order_by("pk")
    )
    _attach_failed_steps(approvals)
    return approvals


def _attach_failed_steps(approvals: list[Approval]) -> None:
    """Each approval's saga gets ``failed`` (the forward step whose failure began the rollback),
    and each approval ``cannot_run``: why its undo cannot run here ('' when it can), the
    runner's own check, shown before anyone approves."""
    now = timezone.now()
    for a in approvals:
        check = undo_route(a.saga, a.step, now).check
        a.cannot_run = "" if check else check.why  # type: ignore[attr-defined]
    sagas = {a.saga_id: a.saga for a in approvals}
    failed = {
        s.saga_id: s
        for s in Step.objects.filter(saga_id__in=list(sagas), state=StepState.FAILED).order_by(
            "position"
        )
    }
    for saga_pk, saga in sagas.items():
        saga.failed = failed.get(saga_pk)  # type: ignore[attr-defined]


def _signature(step: Step) -> str:
    """Failures that share a cause: same tool, same error once numbers and ids are masked."""
    error = re.sub(r"\d+", "#", (step.error or "").strip())[:200]
    return f"{step.tool_name}: {error}"


@dataclass
class FailureGroup:
    signature: str
    tool_name: str
    error: str
    steps: list[Step] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.steps)

    @property
    def bulk(self) -> bool:
        """The group offers "retry all" and "resolve all": it holds more than one failure."""
        return self.size > 1

    @property
    def retry_refused(self) -> str:
        """Why "retry all" is not offered ('' when it is): a retry of some of them could only
        be refused (each step's ``retry_refused``, set by ``failures_open``)."""
        refused = [why for s in self.steps if (why := getattr(s, "retry_refused", ""))]
        if not refused:
            return ""
        if len(refused) == self.size:
            return refused[0]
        return f"{len(refused)} of {self.size} cannot be retried here ({refused[0]})"


def failures_open(projects: Sequence[Project], *, limit: int = QUEUE_LIMIT) -> list[FailureGroup]:
    """Failed or in-doubt undos nobody has settled or left, grouped by error signature.

    Oldest first by the server's clock (when it stored each step's move).
    """
    steps = list(
        Step.objects.filter(rollback_outcomes.waits_for_operator(), saga__project__in=projects)
        .select_related("saga__project", "saga__owner")
        .prefetch_related(
            Prefetch("attempts", queryset=CompensationAttempt.objects.order_by("number"))
        )
        .order_by("changed_at", "pk")[:limit]
    )
    groups: dict[str, FailureGroup] = {}
    now = timezone.now()
    current = approvals_current(s.pk for s in steps)
    for step in steps:
        refused = retry_refused(step.saga, step, current.get(step.pk), now)
        step.retry_refused = refused  # type: ignore[attr-defined]
        key = _signature(step)
        group = groups.setdefault(key, FailureGroup(key, step.tool_name, step.error or ""))
        group.steps.append(step)
    return sorted(groups.values(), key=lambda g: (-len(g.steps), g.signature))


def compensation_plan(saga: Saga) -> list[dict[str, object]]:
    """The undos a rollback of ``saga`` runs, newest step first, and what each waits for.

    Who runs each undo is ``undo_kinds.undo_route``, the answer the worker and every
    operator action go by: an undo nothing here can run reads "cannot run here: <why>"
    or "waits for an operator: <why>" before anyone acts, never "will run unattended".
    """
    policies = policies_enabled(saga.project)  # once, not once per step
    plan = []
    current: dict[int, Approval] = {}  # each step's latest approval that is not void
    for a in saga.approvals.exclude(status=Approval.Status.VOID).order_by("pk"):
        current[a.step_id] = a
    pending = {pk: a for pk, a in current.items() if a.status == Approval.Status.PENDING}
    now = timezone.now()
    for step in sorted(saga.steps.all(), key=lambda s: -s.position):
        route = undo_route(saga, step, now) if step.state in _AHEAD else None
        if step.state in (StepState.PENDING, StepState.FAILED):
            what = "nothing to undo: it did not run"
        elif not step.has_undo:
            what = route.words(step.tool_name) if route else "nothing to undo"
        elif step.state in (StepState.ROLLED_BACK, StepState.RESOLVED, StepState.REJECTED):
            what = f"done: {step.state}"
        elif step.left_at is not None:
            what = f"{LEFT_FAILED} by {step.left_by}: the side effect stays ({step.left_reason})"
        elif route is not None and not route.check:
            what = route.words(step.tool_name)
            if step.pk in pending:
                what += f"; it still waits for approval ({pending[step.pk].why})"
        elif step.state in (StepState.ROLLBACK_FAILED, StepState.IN_DOUBT):
            what = _failed_words(step, current.get(step.pk))
        elif step.pk in pending:
            what = f"waits for approval ({pending[step.pk].why})"
        else:
            why = approval_reason(saga.project, step, policies)
            what = f"will need approval: {why}" if why else "will run unattended"
            if route is not None and route.runner is UndoRunner.AGENT:
                what = route.words(step.tool_name) + (f"; {what}" if why else "")
        # A command is shown as it will run: the approver reads it here and in the queue.
        runs = plan_for(saga, step) if (step.undo or {}).get("kind") == "command" else None
        plan.append(
            {
                "step": step,
                "what": what,
                "runs": runs,
                "runner": route.runner if route else None,
                "cannot_run": route is not None and not route.check,
            }
        )
    return plan


def _failed_words(step: Step, approval: Approval | None) -> str:
    """A failed (or in-doubt) undo's line: what it waits for, with its retry's approval."""
    state = step.state.lower().replace("_", " ")
    if approval is not None and approval.status == Approval.Status.PENDING:
        return f"{state}: a retry waits for approval ({approval.why}); once approved, it runs"
    if approval is not None and approval.status in (
        Approval.Status.REJECTED,
        Approval.Status.EXPIRED,
    ):
        said = approval.decided_reason or approval.status.lower()
        return (
            f"{state}: the approver rejected its retry ({said}); "
            "waits for an operator (resolve or leave)"
        )
    return f"{state}: waits for an operator (retry, resolve or leave)"


LEFT_FAILED = "left failed"
"""How a failed undo an operator chose to leave is named on every page (plan, lists)."""
_AHEAD = frozenset(
    {
        StepState.COMPLETED,
        StepState.AWAITING_APPROVAL,
        StepState.ROLLBACK_FAILED,
        StepState.IN_DOUBT,
    }
)
"""States whose undo may still run (so whether it can run here matters)."""


def saga_page_extras(saga: Saga) -> dict[str, object]:
    """What a saga page shows beyond its steps: the compensation plan and every approval."""
    approvals = list(
        saga.approvals.select_related("step")
        .prefetch_related(Prefetch("votes", queryset=ApprovalVote.objects.select_related("user")))
        .order_by("pk")
    )
    return {"plan": compensation_plan(saga), "approvals": approvals}

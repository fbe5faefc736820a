"""What the pages show, decided in Python: templates only read the answers.

The rules come from undo_core's tables where it has them (which step states an
operator settles: ``sagaboard.models.OPERATOR_STATES``); the facts of one saga,
step or approval are model properties (``Step.needs_operator``,
``Saga.badge_css``, ``Approval.is_pending``). This module puts a page
together: the saga page's timeline (each step with its own approvals), whether
it shows a compensation plan, and which live fragment a queue change sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.urls import reverse
from django.utils import timezone

from sagaboard.domain import operator_actions, ownership, work_queues
from sagaboard.domain.notes import PERMISSION
from sagaboard.models import Approval, Event, Project, Saga, Step
from sagaboard.selectors import notes
from sagaboard.selectors import overview as stats
from sagaboard.web import timeline as saga_timeline
from undo_core import SagaStatus

PLAN_STATUSES = frozenset(
    {
        SagaStatus.IN_PROGRESS,
        SagaStatus.FAILED,
        SagaStatus.COMPENSATING,
        SagaStatus.ROLLBACK_FAILED,
    }
)
"""Saga statuses whose page shows the compensation plan: a rollback is running or halted,
begins (FAILED), or may still come while the saga runs. A COMPLETED or ROLLED_BACK saga
has none to show."""


def shows_compensation_plan(status: str) -> bool:
    return status in PLAN_STATUSES


Timeline = list[tuple[Step, list[Approval]]]


def timeline(steps: Iterable[Step], approvals: Iterable[Approval]) -> Timeline:
    """Each step with its own approvals, oldest first (a step may have been asked twice)."""
    by_step: dict[int, list[Approval]] = {}
    for a in approvals:
        by_step.setdefault(a.step_id, []).append(a)
    return [(step, by_step.get(step.pk, [])) for step in steps]


def overview_live(projects: Sequence[Project], *, fresh: bool = False) -> dict[str, Any]:
    """The overview's live part: the page and its live feed (``fresh`` counts) show it."""
    return {
        "counts": stats.status_counts(projects, fresh=fresh),
        "attention": stats.steps_needing_attention(projects),
        "failures": stats.recent_failures(projects),
    }


def saga_page(saga: Saga, *, events: Sequence[Event], last_log_id: int) -> dict[str, Any]:
    """The saga page's context, for the page and for its live fragment alike."""
    extras = work_queues.saga_page_extras(saga)
    approvals: list[Approval] = extras["approvals"]  # type: ignore[assignment]
    steps = timeline(saga.steps.all(), approvals)
    note_counts = notes.note_counts(saga)
    now = timezone.now()
    # Each step's approval that stands: its latest not void (the list is in pk order).
    current = {a.step_id: a for a in approvals if a.status != Approval.Status.VOID}
    for step, _ in steps:
        step.note_count = note_counts.get(step.step_id, 0)  # type: ignore[attr-defined]
        refused = operator_actions.retry_refused(saga, step, current.get(step.pk), now)
        step.retry_refused = refused  # type: ignore[attr-defined]
    return {
        "saga": saga,
        "events": events,
        "last_log_id": last_log_id,
        "plan": extras["plan"],
        "show_plan": shows_compensation_plan(saga.status),
        "timeline": steps,
        # The time-scaled view (a row per step); it also gives each step its ``durations``.
        "saga_timeline": saga_timeline.for_saga(saga, steps, timezone.now()),
        "saga_note_count": note_counts.get(None, 0),
        "notes_version": notes.collaboration_version(saga),
    }


def collaboration(saga: Saga, user: Any) -> dict[str, Any]:
    """The saga page's owner and notes, for the person looking (not in the live fragment:
    which notes one may edit differs from person to person)."""
    may = user.has_perm(PERMISSION)
    return {
        "notes_read_at": notes.collaboration_version(saga),  # before what it shows
        "notes": notes.notes_for_saga(saga),
        "note_steps": saga.steps.all(),
        "can_collaborate": may,
        "owner_candidates": list(ownership.owner_candidates(saga.project)) if may else [],
        "page_url": reverse("saga_detail", args=[saga.project.slug, saga.saga_id]),
    }


def approval_shows_plan(plan: Mapping[str, Any], cannot_run: str) -> bool:
    """Whether the queue shows what an approval's undo runs.

    An undo the agent runs in its own process that cannot run here says only why (the
    alert beside it): there is nothing here that would run.
    """
    return plan.get("kind") != "client" or not cannot_run


def queue_items(approvals: list[Approval]) -> list[Approval]:
    """Approvals as the queue shows them: each knows whether its plan is shown.

    ``approvals`` come from ``queues`` (which sets ``cannot_run``, the runner's own check).
    """
    for a in approvals:
        a.shows_plan = approval_shows_plan(a.plan, a.cannot_run)  # type: ignore[attr-defined]
    return approvals


QUEUE_ADDED, QUEUE_CHANGED, QUEUE_GONE = "approval-added", "approval-item", "approval-gone"
"""The approval queue's live fragments (partials of ``approval_queue.html``)."""


def queue_fragment(approval: Approval, event_kind: str) -> str:
    """Which fragment an approval event sends to the queue: a decided approval leaves it,
    a new one is appended at its end, any other change replaces the item in place."""
    if not approval.is_pending:
        return QUEUE_GONE
    if event_kind == "approval.requested":
        return QUEUE_ADDED
    return QUEUE_CHANGED

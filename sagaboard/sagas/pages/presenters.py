"""What the pages show, decided in Python: templates only read the answers.

The rules come from undo_core's tables where it has them (which step states an
operator settles: ``sagaboard.models.OPERATOR_STATES``); the facts of one saga,
step or approval are model properties (``Step.needs_operator``,
``Saga.badge_css``, ``Approval.is_pending``). This module puts a page
together: the saga page's timeline (each step with its own approvals) and whether it
shows a compensation plan. The owner and notes are collab's
(``sagaboard.collab.pages.presenters``), the queues' items actions'
(``sagaboard.actions.pages.presenters``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.utils import timezone

from sagaboard.actions.services import operator_actions, work_queues
from sagaboard.collab.reads import notes
from sagaboard.health.reads import overview as stats
from sagaboard.models import Approval, Event, Project, Saga, Step
from sagaboard.sagas.pages import timeline as saga_timeline
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
    version = notes.collaboration_version(saga)  # before what it shows (live.js compares it)
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
        "notes_version": version,
    }

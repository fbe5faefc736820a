"""The work queues' items as the pages and the live feed show them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sagaboard.models import Approval


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

"""The live feed's fragments: partials of the pages they update, rendered out of band.

Each is a ``{% partialdef %}`` of its page, so the page and the live update share
one piece of markup. Rendered with ``oob``, a fragment's root element carries its
own ``hx-swap-oob``; with ``live``, forms carry no CSRF token: fragments are
shared between users, and their forms post with htmx, which sends the page's own
token in a header. The consumer (``sagaboard.live.consumers``) decides who receives
what and calls these from the database thread.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.template.loader import render_to_string

from sagaboard.access.reads import visible
from sagaboard.actions.pages import presenters as queue_presenters
from sagaboard.actions.services import work_queues
from sagaboard.models import Project, Saga
from sagaboard.sagas.pages import presenters

SAGA_LIVE = "sagaboard/saga_detail.html#saga-live"
SAGA_ROW_LIVE = "sagaboard/saga_list.html#saga-row-live"
SAGA_ROW_GONE = "sagaboard/saga_list.html#saga-row-gone"
QUEUE = "sagaboard/approval_queue.html#{}"
ATTENTION_BODY = "sagaboard/attention.html#attention-body"
OVERVIEW_LIVE = "sagaboard/overview.html#overview-live"
LIVE_STATE = "_base.html#live-state"

_LIVE = {"live": True, "oob": True}


def saga_detail(saga_pk: int, log_id: int) -> str:
    """The whole saga body, swapped in for the one the saga page shows."""
    saga = Saga.objects.select_related("project").get(pk=saga_pk)
    full = visible.saga_get_for_project(project=saga.project, saga_id=saga.saga_id)
    assert full is not None  # the same row, read with its steps
    events = visible.event_list_for_saga(saga=saga, limit=1000)
    context = presenters.saga_page(full, events=events, last_log_id=log_id)
    return render_to_string(SAGA_LIVE, {**context, **_LIVE})


def saga_row(saga: Saga, log_id: int) -> str:
    """The saga's row on top of the list (the list drops the older copy), and the cursor."""
    return render_to_string(SAGA_ROW_LIVE, {"saga": saga, "last_log_id": log_id, **_LIVE})


def saga_row_gone(saga_pk: int) -> str:
    """A hidden row that takes the saga off a filtered list it no longer matches."""
    return render_to_string(SAGA_ROW_GONE, {"saga_pk": saga_pk, **_LIVE})


def queue_changes(projects: Sequence[Project], saga_pk: int, step_id: str, kind: str) -> str:
    """The queue items an approval event touched: appended, replaced or removed."""
    approvals = queue_presenters.queue_items(
        work_queues.approvals_for_step(projects, saga_pk, step_id)
    )
    return "".join(
        render_to_string(QUEUE.format(queue_presenters.queue_fragment(a, kind)), {"a": a, **_LIVE})
        for a in approvals
    )


def attention_body(projects: Sequence[Project]) -> str:
    """The needs-attention page's whole body (per user: their projects' failures)."""
    groups = work_queues.failures_open(projects)
    return render_to_string(ATTENTION_BODY, {"groups": groups, **_LIVE})


def overview_live(project_pks: Sequence[int]) -> str:
    """The overview's counts and lists for these projects, read afresh."""
    projects = list(Project.objects.filter(pk__in=project_pks).order_by("slug"))
    context = presenters.overview_live(projects, fresh=True)
    return render_to_string(OVERVIEW_LIVE, {**context, **_LIVE})


def live_state(degraded: bool) -> str:
    """The header's live indicator: "Live", or that updates are delayed (the relay of this
    process cannot read the event log or reach the channel layer). Needs no database."""
    state = "degraded" if degraded else "live"
    return render_to_string(LIVE_STATE, {"live_state": state, **_LIVE})

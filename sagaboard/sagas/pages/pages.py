"""Dashboard pages: thin views over reads; every query scoped to the user's projects."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from sagaboard.access.reads import visible
from sagaboard.collab.pages import presenters as collab_presenters
from sagaboard.health.pages.charts import stacked_bars
from sagaboard.health.reads import overview as stats
from sagaboard.infra import text_policy
from sagaboard.sagas.pages import list_page, presenters
from sagaboard.search.reads import saga_search

LIST_LIMIT = list_page.LIST_LIMIT


@login_required
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    """Is anything wrong right now? Counts, what waits for a person, failures, throughput.

    Live: the feed (``?overview=1``) sends the counts and lists again as events arrive.
    """
    projects = visible.projects_for_user(request.user)
    context = {
        "last_log_id": visible.last_event_id(),  # first: what commits later is sent live
        **presenters.overview_live(projects),
        "charts": [
            (label, stacked_bars(stats.throughput(projects, window)))
            for label, window in (("Last hour", "hour"), ("Last 24 hours", "day"))
        ],
        "no_role": not request.user.has_perm("sagaboard.view_saga"),
    }
    return render(request, "sagaboard/overview.html", context)


@login_required
@require_GET
def saga_list(request: HttpRequest) -> HttpResponse:
    """Sagas, filtered and sorted as the URL says (``saga_search.parse``); keyset pages.

    A bad filter value is a 400 that shows the form again with the field named.
    """
    last_log_id = visible.last_event_id()  # first: what commits later is sent live
    mine = visible.projects_for_user(request.user)
    try:
        search = saga_search.parse(request.GET)
        problem = text_policy.text_problem(request.GET.get("cursor", ""))
        if problem is not None:
            raise saga_search.SearchError("cursor", problem)
    except saga_search.SearchError as err:
        context = list_page.context(
            request, mine, saga_search.SagaFilter(), last_log_id=last_log_id, error=str(err)
        )
        return render(request, "sagaboard/saga_list.html", context, status=400)
    error = ""
    try:
        rows, next_cursor = visible.saga_list(
            projects=mine,
            search=search,
            cursor=request.GET.get("cursor") or None,
            limit=LIST_LIMIT,
            viewer=request.user,
        )
    except visible.BadCursor:
        rows, next_cursor, error = [], None, "That page link is not valid any more."
    if not request.user.has_perm("sagaboard.view_saga"):
        error = "You have no role yet: ask an admin to add you to the viewer group."
    context = list_page.context(
        request,
        mine,
        search,
        last_log_id=last_log_id,
        rows=rows,
        next_cursor=next_cursor,
        error=error,
    )
    return render(request, "sagaboard/saga_list.html", context)


@login_required
@require_GET
def saga_detail(request: HttpRequest, project: str, saga_id: str) -> HttpResponse:
    """One saga: its steps as a timeline, every attempt, and the event log.

    The log's newest id is read first: a change committed while the page is read (a
    worker's last transition) is then sent live, never hidden behind a cursor past it.
    """
    last_log_id = visible.last_event_id()
    allowed = [p for p in visible.projects_for_user(request.user) if p.slug == project]
    if text_policy.text_problem(saga_id) is not None:  # no stored id holds NUL
        allowed = []
    saga = visible.saga_get_for_project(project=allowed[0], saga_id=saga_id) if allowed else None
    if saga is None:
        raise Http404("no such saga in your projects")
    events = visible.event_list_for_saga(saga=saga, limit=1000)
    context = presenters.saga_page(saga, events=events, last_log_id=last_log_id)
    context.update(
        collab_presenters.collaboration(saga, request.user, read_at=context["notes_version"])
    )
    return render(request, "sagaboard/saga_detail.html", context)

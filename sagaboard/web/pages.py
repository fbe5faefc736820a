"""Dashboard pages: thin views over selectors; every query scoped to the user's projects."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from sagaboard.infra import text_policy
from sagaboard.selectors import overview as stats
from sagaboard.selectors import visible
from sagaboard.web import presenters
from sagaboard.web.charts import stacked_bars
from undo_core import RollbackOutcome, SagaStatus

LIST_LIMIT = 50
OUTCOME_CHOICES = [
    ("", "any"),
    (RollbackOutcome.CLEAN.value, "rolled back cleanly"),
    (RollbackOutcome.WITH_EXCEPTIONS.value, "with exceptions (rejected, resolved, left, in doubt)"),
]
SINCE = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}


@login_required
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    """Is anything wrong right now? Counts, what waits for a person, failures, throughput."""
    projects = visible.projects_for_user(request.user)
    context = {
        "counts": stats.status_counts(projects),
        "attention": stats.steps_needing_attention(projects),
        "failures": stats.recent_failures(projects),
        "charts": [
            (label, stacked_bars(stats.throughput(projects, window)))
            for label, window in (("Last hour", "hour"), ("Last 24 hours", "day"))
        ],
        "cap": stats.COUNT_CAP,
        "no_role": not request.user.has_perm("sagaboard.view_saga"),
    }
    return render(request, "sagaboard/overview.html", context)


@login_required
@require_GET
def saga_list(request: HttpRequest) -> HttpResponse:
    """Sagas newest first; filter by project, status, tool, name/id and time; keyset pages."""
    mine = visible.projects_for_user(request.user)
    chosen = request.GET.get("project", "")
    projects = [p for p in mine if p.slug == chosen] if chosen else mine
    statuses = [s for s in request.GET.getlist("status") if s in SagaStatus.__members__]
    outcome = request.GET.get("outcome", "")
    outcome = outcome if outcome in RollbackOutcome.__members__ else ""
    waiting = request.GET.get("waiting") == "1"
    since = SINCE.get(request.GET.get("since", ""))
    for name in ("tool", "q", "cursor"):
        problem = text_policy.text_problem(request.GET.get(name, ""))
        if problem is not None:  # NUL: nothing stored holds one, PostgreSQL cannot compare it
            raise BadRequest(f"{name} {problem}")
    error = ""
    try:
        rows, next_cursor = visible.saga_list(
            projects=projects,
            statuses=statuses,
            tool=request.GET.get("tool") or None,
            q=request.GET.get("q") or None,
            updated_after=timezone.now() - since if since else None,
            cursor=request.GET.get("cursor") or None,
            limit=LIST_LIMIT,
            outcome=outcome or None,
            waiting=waiting,
        )
    except visible.BadCursor:
        rows, next_cursor, error = [], None, "That page link is not valid any more."
    if not request.user.has_perm("sagaboard.view_saga"):
        error = "You have no role yet: ask an admin to add you to the viewer group."
    query = request.GET.copy()
    query.pop("cursor", None)
    last_log_id = visible.last_event_id()
    live = None
    if not request.GET.get("cursor"):  # only the first page changes live
        params = QueryDict(mutable=True)
        params.update({"list": "1", "after": str(last_log_id)})
        for key in ("project", "tool", "q"):
            if request.GET.get(key):
                params[key] = request.GET[key]
        if len(statuses) == 1:
            params["status"] = statuses[0]
        if outcome:
            params["outcome"] = outcome
        if waiting:
            params["waiting"] = "1"
        live = params.urlencode()
    return render(
        request,
        "sagaboard/saga_list.html",
        {
            "sagas": rows,
            "next_cursor": next_cursor,
            "projects": mine,
            "statuses": [s.value for s in SagaStatus],
            "outcomes": OUTCOME_CHOICES,
            "since_choices": [
                ("", "any time"),
                ("1h", "last hour"),
                ("24h", "last 24 hours"),
                ("7d", "last 7 days"),
            ],
            "chosen": {"project": chosen, "statuses": statuses, **request.GET.dict()},
            "query": query.urlencode(),
            "error": error,
            "last_log_id": last_log_id,
            "live_query": live,
            "limit": LIST_LIMIT,
        },
    )


@login_required
@require_GET
def saga_detail(request: HttpRequest, project: str, saga_id: str) -> HttpResponse:
    """One saga: its steps as a timeline, every attempt, and the event log."""
    allowed = [p for p in visible.projects_for_user(request.user) if p.slug == project]
    if text_policy.text_problem(saga_id) is not None:  # no stored id holds NUL
        allowed = []
    saga = visible.saga_get_for_project(project=allowed[0], saga_id=saga_id) if allowed else None
    if saga is None:
        raise Http404("no such saga in your projects")
    events = visible.event_list_for_saga(saga=saga, limit=1000)
    context = presenters.saga_page(saga, events=events, last_log_id=visible.last_event_id())
    return render(request, "sagaboard/saga_detail.html", context)

"""Batch operations' pages: confirm an action over a filter, follow the job, cancel it.

Thin views over ``sagaboard.batches.services.batches`` (which freezes the items, runs them through
the single actions' services and checks every rule). The job page's progress polls its
own fragment every second (htmx) and stops once the job has ended (HTTP 286): not when its
requests are made, but when every undo they started has an outcome (each read settles the
items whose undo has ended, ``batch_outcomes.job_current``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from sagaboard.actions.services import action_reports, batch_outcomes
from sagaboard.batches.services import batches
from sagaboard.errors import ServiceError
from sagaboard.models import BatchItem, BatchJob

ITEMS_SHOWN = 500
STOP_POLLING = 286
"""htmx stops polling an element that answers 286."""


def _htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def _filter_of(request: HttpRequest) -> QueryDict:
    """The list filter the batch is over: the page's query string (GET) or the confirmed one."""
    if request.method == "POST":
        return QueryDict(request.POST.get("filter", ""))
    query = request.GET.copy()
    query.pop("action", None)
    return query


@login_required
@require_http_methods(["GET", "POST"])
def batch_new(request: HttpRequest) -> HttpResponse:
    """GET: the confirm page (exact count, a sample, the filter, a reason); POST: start it."""
    source = request.POST if request.method == "POST" else request.GET
    action = source.get("action", "")
    query = _filter_of(request)
    error, status = "", 200
    if request.method == "POST":
        expected = request.POST.get("expected", "")
        try:
            job = batches.batch_create(
                user=request.user, action=action, query=query,
                reason=request.POST.get("reason", ""),
                expected=int(expected) if expected.isdigit() else None,
            )  # fmt: skip
        except ServiceError as refused:
            error, status = refused.message, refused.status
        else:
            where = reverse("batch_detail", args=[job.pk])
            if _htmx(request):
                return HttpResponse(status=200, headers={"HX-Redirect": where})
            return redirect(where)
    try:
        preview = batches.batch_preview(user=request.user, action=action, query=query)
    except ServiceError as refused:
        context: dict[str, Any] = {"error": refused.message, "preview": None}
        return render(request, "sagaboard/batch_confirm.html", context, status=refused.status)
    context = {"preview": preview, "error": error, "reason": request.POST.get("reason", "")}
    return render(request, "sagaboard/batch_confirm.html", context, status=status)


@login_required
@require_GET
def batch_list(request: HttpRequest) -> HttpResponse:
    """Recent batch jobs of the user's projects, newest first."""
    jobs = list(batches.jobs_visible(request.user)[:100])
    return render(request, "sagaboard/batch_list.html", {"jobs": jobs})


def _job_context(job: BatchJob) -> dict[str, object]:
    labels = batch_outcomes.labels(job.action)
    pending = job.total - job.done
    keys = batch_outcomes.shown_outcomes(job.action)
    counts = [(key, labels[key], job.counts.get(key, 0)) for key in keys]
    if pending:
        counts.append((batch_outcomes.NOT_STARTED, labels[batch_outcomes.NOT_STARTED], pending))
    return {"job": job, "verb": action_reports.VERBS[job.action], "counts": counts,
            "pending": pending}  # fmt: skip


@login_required
@require_GET
def batch_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One job: live progress, its counts, every item's outcome (filterable), Cancel."""
    try:
        job = batches.job_get(user=request.user, pk=pk)
    except ServiceError as refused:
        return render(request, "sagaboard/batch_detail.html", {"error": refused.message},
                      status=refused.status)  # fmt: skip
    job = batch_outcomes.job_current(job)
    context = {**_job_context(job), **_items_context(job, request.GET.get("outcome", ""))}
    return render(request, "sagaboard/batch_detail.html", context)


def _items_context(job: BatchJob, outcome: str) -> dict[str, object]:
    """The items the page lists (``outcome``: only those with it), each with its outcome's
    words and where it is."""
    labels = batch_outcomes.labels(job.action)
    if outcome not in labels:
        outcome = ""
    items = BatchItem.objects.filter(job=job).order_by("position")
    if outcome:
        items = items.filter(batch_outcomes.outcome_filter(outcome))
    shown = list(items[:ITEMS_SHOWN])
    places = batch_outcomes.item_places(shown)
    said = [(item, places.get(item.pk), labels[item.outcome or batch_outcomes.NOT_STARTED])
            for item in shown]  # fmt: skip
    return {
        "items": said,
        "shown_limit": ITEMS_SHOWN,
        "outcome": outcome,
        "outcomes": [("", "all"), *labels.items()],
    }


@login_required
@require_GET
def batch_progress(request: HttpRequest, pk: int) -> HttpResponse:
    """The progress fragment the job page polls, with its items; 286 (stop polling) once the
    job ended."""
    try:
        job = batches.job_get(user=request.user, pk=pk)
    except ServiceError as refused:
        return HttpResponse(refused.message, status=refused.status)
    job = batch_outcomes.job_current(job)
    status = STOP_POLLING if job.ended and _htmx(request) else 200
    context = {**_job_context(job), **_items_context(job, request.GET.get("outcome", ""))}
    # The items go out of band with the progress: a finished job never lists an item as
    # "not started yet" beside counts that say it was undone.
    return render(
        request, "sagaboard/batch_detail.html#batch-live", {**context, "oob": True}, status=status
    )


@login_required
@require_POST
def batch_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel: a queued job stops at once, a running one after its current chunk."""
    try:
        job = batches.batch_cancel(user=request.user, pk=pk)
    except ServiceError as refused:
        if _htmx(request):
            return HttpResponse(refused.message, status=refused.status)
        messages.error(request, refused.message)
        return redirect("batch_detail", pk=pk) if refused.status != 404 else redirect("batch_list")
    if _htmx(request):
        return render(request, "sagaboard/batch_detail.html#batch-progress", _job_context(job))
    messages.success(request, f"Batch #{job.pk}: {job.state}.")
    return redirect("batch_detail", pk=pk)

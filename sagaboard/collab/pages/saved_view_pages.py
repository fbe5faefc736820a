"""Saved list views: save the list's current filter under a name, or delete one (POST, CSRF)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from sagaboard.access.reads import visible
from sagaboard.collab.reads import saved_views as saved_view_reads
from sagaboard.collab.services import saved_views
from sagaboard.errors import ServiceError
from sagaboard.infra import text_policy


@login_required
@require_POST
def saved_view_save(request: HttpRequest) -> HttpResponse:
    """Save the filter the list showed (its query string) as one of my views; back to it."""
    query = request.POST.get("query", "")
    name = request.POST.get("name", "")
    if text_policy.text_problem(query) or text_policy.text_problem(name):
        messages.error(request, "The view was not saved: its name or filter holds NUL.")
        return redirect("saga_list")
    try:
        view = saved_views.save(
            user=request.user,
            name=name,
            query=query,
            shared=request.POST.get("shared") == "1",
            projects=visible.projects_for_user(request.user),
        )
    except ServiceError as err:
        messages.error(request, f"The view was not saved: {err.message}")
        return redirect(reverse("saga_list") + (f"?{query}" if query and len(query) < 2000 else ""))
    messages.success(request, f"Saved the view “{view.name}”.")
    return redirect(reverse("saga_list") + (f"?{view.query}" if view.query else ""))


@login_required
@require_POST
def saved_view_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """Delete one of my own views (another's, or none: 404)."""
    view = saved_view_reads.get_own(request.user, pk)
    if view is None:
        raise Http404("no such saved view of yours")
    saved_views.delete(user=request.user, view=view)
    messages.success(request, f"Deleted the view “{view.name}”.")
    return redirect("saga_list")

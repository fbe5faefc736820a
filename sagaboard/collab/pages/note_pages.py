"""Notes and owners from the saga page (``collab.services.notes``, ``.ownership``).

Thin views: each posts to its service and goes back to where the form was (the saga's
notes, or the page named by ``next``) with what happened as a message; a refusal is a
page with the service's status and message, nothing changed, and a link back.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from sagaboard.access.reads import visible
from sagaboard.collab.pages import presenters
from sagaboard.collab.services import notes, ownership
from sagaboard.errors import ServiceError
from sagaboard.models import Saga
from sagaboard.ui.next_path import next_path


def _back(request: HttpRequest, saga: Saga | None, anchor: str = "notes") -> HttpResponse:
    """To the form's ``next`` (a path of this site), else the saga page at ``anchor``."""
    wanted = next_path(request)
    if wanted:
        return redirect(wanted)
    if saga is None:
        return redirect("saga_list")
    url = reverse("saga_detail", args=[saga.project.slug, saga.saga_id])
    return redirect(f"{url}#{anchor}")


HEADINGS = {403: "Not allowed", 404: "Not found", 409: "Not done"}


def _refused(request: HttpRequest, err: ServiceError) -> HttpResponse:
    """The refusal with its status and message, nothing changed, and the way back."""
    context = {"message": err.message, "heading": HEADINGS.get(err.status),
               "back": next_path(request)}  # fmt: skip
    return render(request, "sagaboard/bad_request.html", context, status=err.status)


@login_required
@require_GET
def saga_notes(request: HttpRequest, saga_pk: int) -> HttpResponse:
    """The saga page's owner and notes section alone, as the person asking sees it: the
    page reads it again when the live body says a note or the owner changed."""
    saga = (
        Saga.objects.filter(pk=saga_pk, project__in=visible.projects_for_user(request.user))
        .select_related("project", "owner")
        .first()
    )
    if saga is None:
        raise Http404("no such saga in your projects")
    context = {"saga": saga, **presenters.collaboration(saga, request.user)}
    return render(request, "sagaboard/saga_detail.html#collaboration", context)


@login_required
@require_POST
def note_add(request: HttpRequest, saga_pk: int) -> HttpResponse:
    try:
        note = notes.note_add(
            user=request.user, saga_pk=saga_pk, body=request.POST.get("body", ""),
            step_id=request.POST.get("step") or None,
        )  # fmt: skip
    except ServiceError as err:
        return _refused(request, err)
    messages.success(request, "Note added.")
    return _back(request, note.saga, f"note-{note.pk}")


@login_required
@require_POST
def note_edit(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        note = notes.note_edit(user=request.user, note_pk=pk, body=request.POST.get("body", ""))
    except ServiceError as err:
        return _refused(request, err)
    messages.success(request, "Note saved; its earlier text is in its history.")
    return _back(request, note.saga, f"note-{note.pk}")


@login_required
@require_POST
def note_delete(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        note = notes.note_delete(user=request.user, note_pk=pk)
    except ServiceError as err:
        return _refused(request, err)
    messages.success(request, "Note deleted (the audit trail keeps it).")
    return _back(request, note.saga)


@login_required
@require_POST
def saga_assign(request: HttpRequest, saga_pk: int) -> HttpResponse:
    try:
        saga = ownership.saga_assign(
            user=request.user, saga_pk=saga_pk, assignee=request.POST.get("owner", "").strip()
        )
    except ServiceError as err:
        return _refused(request, err)
    owner = saga.owner.get_username() if saga.owner_id else ""
    messages.success(request, f"Assigned to {owner}." if owner else "Nobody owns it now.")
    return _back(request, saga, "owner")

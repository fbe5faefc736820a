"""A step's payloads on their own: the raw JSON behind the saga page's trees (input, output,
undo attempts), and the trees of one step (a page, or the fragment a long saga's page loads)."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from sagaboard.access.reads import visible
from sagaboard.infra import text_policy
from sagaboard.models import Step
from sagaboard.sagas.reads import payloads as stored
from sagaboard.ui import payloads

PARTS = ("input", "output", "attempts")


def _filename(saga_id: str, step_id: str, part: str) -> str:
    safe = "".join(
        c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in f"{saga_id}-{step_id}"
    )
    return f"{safe[:150]}-{part}.json"


def _step(request: HttpRequest, project: str, saga_id: str, step_id: str) -> Step:
    if any(text_policy.text_problem(v) for v in (saga_id, step_id)):  # no stored id holds NUL
        raise Http404("no such step in your projects")
    step = stored.step_for_projects(
        projects=visible.projects_for_user(request.user),
        project=project,
        saga_id=saga_id,
        step_id=step_id,
    )
    if step is None:
        raise Http404("no such step in your projects")
    return step


@login_required
@require_GET
def step_trees(request: HttpRequest, project: str, saga_id: str, step_id: str) -> HttpResponse:
    """One step's input and output trees and their diff: the fragment a long saga's page
    loads when a reader opens a step's payloads (htmx), or a page of its own (a link)."""
    step = _step(request, project, saga_id, step_id)
    context = {"step": step, "saga": step.saga}
    if request.headers.get("HX-Request") == "true":
        return render(request, "sagaboard/_payload.html#step-trees-loaded", context)
    return render(request, "sagaboard/step_payloads.html", context)


@login_required
@require_GET
def step_payload(
    request: HttpRequest, project: str, saga_id: str, step_id: str, part: str
) -> HttpResponse:
    """``part`` of a step as a JSON file: the stored text itself for input and output, so a
    value too large for the page's tree is there whole; 404 outside the user's projects."""
    if part not in PARTS:
        raise Http404("no such part of a step: input, output or attempts")
    step = _step(request, project, saga_id, step_id)
    if part == "attempts":
        body = json.dumps(
            payloads.attempts_json(stored.attempts_of(step)), ensure_ascii=False, indent=2
        )
    else:
        raw = stored.stored_json(step, part)
        body = "null" if raw is None else raw
    response = HttpResponse(body, content_type="application/json; charset=utf-8")
    name = _filename(step.saga.saga_id, step.step_id, part)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response

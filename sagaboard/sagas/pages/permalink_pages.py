"""Permalinks that need a page of their own: an approval's address, whatever became of it.

The approval queue lists only pending approvals, so ``/approvals/#approval-<pk>`` finds
nothing once one is decided. ``/approvals/<pk>/`` stays valid: it sends the user to the
approval's record on its saga page (``#approval-<pk>``), where decided ones are kept too.
Scoped like every page: an approval outside the user's projects is a 404, as one that
does not exist.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_GET

from sagaboard.access.reads import visible
from sagaboard.infra import permalinks


@login_required
@require_GET
def approval_permalink(request: HttpRequest, pk: int) -> HttpResponse:
    """An approval's permalink: its record on the saga page."""
    projects = visible.projects_for_user(request.user)
    approval = visible.approval_get(projects=projects, pk=pk)
    if approval is None:
        raise Http404("no such approval in your projects")
    saga = approval.saga
    path = permalinks.saga_path(saga.project.slug, saga.saga_id)
    return HttpResponseRedirect(f"{path}#{permalinks.approval_anchor(approval.pk)}")

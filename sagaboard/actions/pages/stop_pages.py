"""Stop a running saga from its page: an operator asks for its rollback (``saga_stop``).

Thin: posts to the service and goes back to the saga page, whose stop state says what
happens next, read from the record and kept up to date live (``saga_detail.html#stop-state``):
no message of its own beside it, so a rollback that failed at once reads as one red banner,
not a green "requested" next to it. A refusal is a page with the service's status and
message, nothing changed.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from sagaboard.actions.services import saga_stop
from sagaboard.collab.pages.note_pages import _refused
from sagaboard.errors import ServiceError


@login_required
@require_POST
def saga_rollback_request(request: HttpRequest, saga_pk: int) -> HttpResponse:
    try:
        saga = saga_stop.rollback_request(
            saga_pk=saga_pk, user=request.user, reason=request.POST.get("reason", "")
        )
    except ServiceError as err:
        return _refused(request, err)
    url = reverse("saga_detail", args=[saga.project.slug, saga.saga_id])
    return redirect(f"{url}#stop-state")

"""The saga page's owner and notes, put together for the person looking."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from sagaboard.collab.reads import notes
from sagaboard.collab.services import ownership
from sagaboard.collab.services.notes import PERMISSION
from sagaboard.models import Saga, User


def collaboration(saga: Saga, user: User, *, read_at: int | None = None) -> dict[str, Any]:
    """The saga page's owner and notes, for the person looking (not in the live fragment:
    which notes one may edit differs from person to person).

    ``read_at``: the notes' version the caller already read, before anything this shows
    (the saga page reads it once for its live body and for this section alike)."""
    may = user.has_perm(PERMISSION)
    if read_at is None:
        read_at = notes.collaboration_version(saga)  # before what it shows
    return {
        "notes_read_at": read_at,
        "notes": notes.notes_for_saga(saga),
        "note_steps": saga.steps.all(),
        "can_collaborate": may,
        "owner_candidates": list(ownership.owner_candidates(saga.project)) if may else [],
        "page_url": reverse("saga_detail", args=[saga.project.slug, saga.saga_id]),
    }

"""Notes as the saga page shows them (``collab.services.notes`` writes them)."""

from __future__ import annotations

from django.db.models import Count, Max, Prefetch

from sagaboard.models import Event, Note, NoteRevision, Saga


def notes_for_saga(saga: Saga) -> list[Note]:
    """The saga's notes not deleted, oldest first, each with its earlier texts (newest
    first): two queries whatever the count."""
    return list(
        Note.objects.filter(saga=saga, deleted_at__isnull=True)
        .select_related("step")
        .prefetch_related(Prefetch("revisions", queryset=NoteRevision.objects.order_by("-pk")))
        .order_by("created_at", "pk")
    )


def note_counts(saga: Saga) -> dict[str | None, int]:
    """How many notes the saga (key None) and each step (its ``step_id``) has."""
    rows = (
        Note.objects.filter(saga=saga, deleted_at__isnull=True)
        .values("step__step_id")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {row["step__step_id"]: row["n"] for row in rows}


COLLABORATION_EVENTS = ("note.add", "note.edit", "note.delete", "saga.assign")


def collaboration_version(saga: Saga) -> int:
    """The id of the saga's newest note or owner change (0: none yet).

    The saga page's notes are per person (which ones one may edit), so they are not in
    the shared live body: the body carries this number, and a page whose notes section
    was read at another number reads it again (static/sagaboard/live.js).
    """
    newest = (
        Event.objects.filter(saga=saga, kind__in=COLLABORATION_EVENTS)
        .aggregate(top=Max("pk"))
        .get("top")
    )
    return int(newest or 0)

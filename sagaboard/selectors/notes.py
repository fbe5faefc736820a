"""Notes as the saga page shows them (``domain.notes`` writes them)."""

from __future__ import annotations

from django.db.models import Count, Prefetch

from sagaboard.models import Note, NoteRevision, Saga


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

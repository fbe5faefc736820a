"""A step's stored JSON, exactly as stored, for the saga page's raw downloads."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from django.db.models import TextField
from django.db.models.functions import Cast

from sagaboard.models import CompensationAttempt, Project, Step

STORED_PARTS = ("input", "output")
"""Parts kept as JSON text in the step's row; ``attempts`` is made from their rows."""


def _splits(saga_id: str, step_id: str) -> Iterator[tuple[str, str]]:
    # Ids may hold "/" and even "/steps/": the URL's greedy match gave the longest saga id;
    # every other split of the same text is tried too, longest saga id first.
    whole = f"{saga_id}/steps/{step_id}"
    at = len(whole)
    while (at := whole.rfind("/steps/", 0, at)) > 0:
        yield whole[:at], whole[at + len("/steps/") :]


def step_for_projects(
    *, projects: Sequence[Project], project: str, saga_id: str, step_id: str
) -> Step | None:
    """The step ``step_id`` of saga ``saga_id`` in ``project``, if the caller sees it."""
    allowed = [p for p in projects if p.slug == project]
    if not allowed:
        return None
    for saga, step in _splits(saga_id, step_id):
        found = (
            Step.objects.filter(saga__project=allowed[0], saga__saga_id=saga, step_id=step)
            .select_related("saga__project")
            .first()
        )
        if found is not None:
            return found
    return None


def stored_json(step: Step, part: str) -> str | None:
    """The column's text as the database holds it (None: SQL NULL), not parsed and printed
    again: what the agent sent is what downloads, key order and number spelling kept."""
    assert part in STORED_PARTS
    return (
        Step.objects.filter(pk=step.pk)
        .annotate(raw=Cast(part, output_field=TextField()))
        .values_list("raw", flat=True)
        .first()
    )


def attempts_of(step: Step) -> list[CompensationAttempt]:
    return list(CompensationAttempt.objects.filter(step=step).order_by("number"))

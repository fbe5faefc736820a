"""The sagas a list filter selects, for export: read in keyset chunks, any number of them.

The filter is the saga list's own (``saga_search.parse``: the same query string, the same
rules, the same 400s), and so is the order (the filter's sort, id breaking ties) and the
keyset walk (``saga_search.page``: a row-value comparison from the last row on). Each chunk
is a constant number of queries (the sagas with their row facts; with ``steps`` their
steps too), whatever its size, and nothing is kept between chunks: memory stays flat for a
thousand sagas or a million.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sagaboard.models import Project, Saga, Step, Viewer
from sagaboard.search.reads import saga_search

CHUNK = 500
"""Sagas per chunk (one round of queries)."""


def projects_chosen(mine: Sequence[Project], f: saga_search.SagaFilter) -> list[Project]:
    """The user's projects the filter keeps; ``SearchError`` for a project not theirs."""
    if not f.project:
        return list(mine)
    chosen = [p for p in mine if p.slug == f.project]
    if not chosen:
        raise saga_search.SearchError("project", "not one of your projects")
    return chosen


@dataclass
class ExportRow:
    """One saga as exported; ``steps`` only when asked for."""

    saga: Saga
    project: str
    step_count: int
    failed_tool: str | None
    steps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def duration_seconds(self) -> float | None:
        """From its start to its last change, as its agent (or the engine) reported them."""
        if self.saga.created_at is None or self.saga.updated_at is None:
            return None
        return round((self.saga.updated_at - self.saga.created_at).total_seconds(), 3)


STEP_FIELDS = ("saga_id", "step_id", "position", "tool_name", "state", "created_at",
               "completed_at", "error")  # fmt: skip


def export_rows(
    projects: Sequence[Project],
    f: saga_search.SagaFilter,
    *,
    steps: bool = False,
    chunk: int = CHUNK,
    viewer: Viewer | None = None,
) -> Iterator[ExportRow]:
    """Every saga the filter selects in ``projects``, in its order, chunk by chunk
    (``viewer``: whom "owner: me" means)."""
    if not projects:
        return
    cursor: str | None = None
    while True:
        sagas, cursor = saga_search.page(
            f, list(projects), cursor=cursor, limit=chunk, viewer=viewer
        )
        yield from _chunk_rows(sagas, steps)
        if cursor is None:
            return


def _chunk_rows(sagas: list[Saga], steps: bool) -> Iterator[ExportRow]:
    by_saga: dict[int, list[dict[str, Any]]] = {}
    if steps and sagas:
        rows = Step.objects.filter(saga_id__in=[s.pk for s in sagas]).order_by(
            "saga_id", "position"
        )
        for row in rows.values(*STEP_FIELDS):
            by_saga.setdefault(row.pop("saga_id"), []).append(row)
    for saga in sagas:
        yield ExportRow(saga, saga.project.slug, saga.step_count, saga.failed_tool,
                        by_saga.get(saga.pk, []))  # fmt: skip

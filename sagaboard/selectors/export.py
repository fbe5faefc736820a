"""The sagas a list filter selects, for export: read in keyset chunks, any number of them.

Each chunk is a constant number of queries (the sagas, their step counts, their failed
steps' tools; or with ``steps`` all their steps), whatever its size, and nothing is
kept between chunks: memory stays flat for a thousand sagas or a million. The order is
the list's: newest first by the server's clock, ``(changed_at, id)`` descending, which
walks the same indexes as the saga list.

``parse_filter`` reads the saga list's query string (``sagaboard.web.pages.saga_list``:
project, status, outcome, waiting, tool, q, since). It is the one place that does: when
the list's own search parser lands, it replaces this function.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.http import QueryDict
from django.utils import timezone

from sagaboard.infra import text_policy
from sagaboard.models import Project, Saga, Step
from undo_core import RollbackOutcome, SagaStatus

CHUNK = 500
"""Sagas per chunk (one round of queries)."""
SINCE = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}
TEXT_MAX = 200


class BadFilter(ValueError):
    """A filter value the export cannot use; the message names the field."""


@dataclass(frozen=True)
class SagaFilter:
    """What the saga list filters by (its query string, checked)."""

    project: str = ""
    statuses: tuple[str, ...] = ()
    outcome: str = ""
    waiting: bool = False
    tool: str = ""
    q: str = ""
    since: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The filter for the audit record: only the fields that were set."""
        found: dict[str, Any] = {
            "project": self.project,
            "status": list(self.statuses),
            "outcome": self.outcome,
            "waiting": self.waiting,
            "tool": self.tool,
            "q": self.q,
            "since": self.since,
        }
        return {k: v for k, v in found.items() if v}


def parse_filter(params: QueryDict) -> SagaFilter:
    """The saga list's parameters, checked: ``BadFilter`` names a value that is wrong."""
    statuses = tuple(s for s in params.getlist("status") if s)
    for status in statuses:
        if status not in SagaStatus.__members__:
            raise BadFilter(f"status: {status} is not one of {', '.join(SagaStatus.__members__)}")
    outcome = params.get("outcome", "")
    if outcome and outcome not in RollbackOutcome.__members__:
        raise BadFilter(f"outcome: must be one of {', '.join(RollbackOutcome.__members__)}")
    waiting = params.get("waiting", "")
    if waiting not in ("", "1"):
        raise BadFilter("waiting: must be 1 (or left out)")
    since = params.get("since", "")
    if since and since not in SINCE:
        raise BadFilter(f"since: must be one of {', '.join(SINCE)}")
    texts = {}
    for name in ("project", "tool", "q"):
        value = params.get(name, "")
        problem = text_policy.text_problem(value)
        if problem is not None:
            raise BadFilter(f"{name} {problem}")
        if len(value) > TEXT_MAX:
            raise BadFilter(f"{name}: at most {TEXT_MAX} characters")
        texts[name] = value
    return SagaFilter(statuses=statuses, outcome=outcome, waiting=waiting == "1", since=since,
                      **texts)  # fmt: skip


def projects_chosen(mine: Sequence[Project], f: SagaFilter) -> list[Project]:
    """The user's projects the filter keeps; ``BadFilter`` for a project not theirs."""
    if not f.project:
        return list(mine)
    chosen = [p for p in mine if p.slug == f.project]
    if not chosen:
        raise BadFilter("project: not one of your projects")
    return chosen


def _queryset(projects: Sequence[Project], f: SagaFilter, now: datetime) -> QuerySet[Saga]:
    qs = Saga.objects.filter(project_id__in=[p.pk for p in projects])
    if len(projects) == 1:
        qs = Saga.objects.filter(project_id=projects[0].pk)
    if f.statuses:
        qs = qs.filter(status__in=list(f.statuses))
    if f.outcome:
        qs = qs.filter(outcome=f.outcome)
    if f.waiting:
        qs = qs.filter(waiting_for__isnull=False)
    if f.tool:
        qs = qs.filter(pk__in=Step.objects.filter(tool_name=f.tool).values("saga_id"))
    if f.q:
        qs = qs.filter(Q(name__istartswith=f.q) | Q(saga_id__startswith=f.q))
    if f.since:
        qs = qs.filter(changed_at__gt=now - SINCE[f.since])
    return qs


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


SAGA_FIELDS = ("pk", "project_id", "saga_id", "name", "status", "outcome", "created_at",
               "updated_at", "changed_at", "failed_step")  # fmt: skip
STEP_FIELDS = ("saga_id", "step_id", "position", "tool_name", "state", "created_at",
               "completed_at", "error")  # fmt: skip


def export_rows(
    projects: Sequence[Project],
    f: SagaFilter,
    *,
    steps: bool = False,
    chunk: int = CHUNK,
    now: datetime | None = None,
) -> Iterator[ExportRow]:
    """Every saga the filter selects in ``projects``, newest first, chunk by chunk."""
    if not projects:
        return
    slugs = {p.pk: p.slug for p in projects}
    base = _queryset(projects, f, now or timezone.now()).only(*SAGA_FIELDS)
    after: tuple[datetime, int] | None = None
    while True:
        qs = base
        if after is not None:
            at, pk = after
            qs = qs.filter(Q(changed_at__lt=at) | Q(changed_at=at, pk__lt=pk), changed_at__lte=at)
        sagas = list(qs.order_by("-changed_at", "-pk")[:chunk])
        if not sagas:
            return
        yield from _chunk_rows(sagas, slugs, steps)
        if len(sagas) < chunk:
            return
        after = sagas[-1].changed_at, sagas[-1].pk


def _chunk_rows(sagas: list[Saga], slugs: dict[int, str], steps: bool) -> Iterator[ExportRow]:
    pks = [s.pk for s in sagas]
    by_saga: dict[int, list[dict[str, Any]]] = {}
    if steps:
        rows = Step.objects.filter(saga_id__in=pks).order_by("saga_id", "position")
        for row in rows.values(*STEP_FIELDS):
            by_saga.setdefault(row.pop("saga_id"), []).append(row)
        counts = {pk: len(found) for pk, found in by_saga.items()}
        tools = {pk: {s["step_id"]: s["tool_name"] for s in found} for pk, found in by_saga.items()}
        failed = {s.pk: tools.get(s.pk, {}).get(s.failed_step or "") for s in sagas}
    else:
        counts = dict(
            Step.objects.filter(saga_id__in=pks)
            .values("saga_id")
            .annotate(n=Count("pk"))
            .order_by()
            .values_list("saga_id", "n")
        )
        failed = _failed_tools(sagas)
    for saga in sagas:
        yield ExportRow(saga, slugs[saga.project_id], counts.get(saga.pk, 0),
                        failed.get(saga.pk), by_saga.get(saga.pk, []))  # fmt: skip


def _failed_tools(sagas: list[Saga]) -> dict[int, str | None]:
    """The tool of each saga's failed step: one query for the chunk."""
    wanted = {s.pk: s.failed_step for s in sagas if s.failed_step}
    if not wanted:
        return {}
    rows = Step.objects.filter(saga_id__in=list(wanted), step_id__in=set(wanted.values()))
    return {
        saga_pk: tool
        for saga_pk, step_id, tool in rows.values_list("saga_id", "step_id", "tool_name")
        if wanted.get(saga_pk) == step_id
    }

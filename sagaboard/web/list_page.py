"""What the saga list page shows around its rows: the filter bar's values, sort headers,
quick ranges, saved views and the live feed's query. Views stay thin; templates lay out."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.http import HttpRequest, QueryDict

from sagaboard.models import Project, Saga
from sagaboard.selectors import saga_search, saved_views, visible
from undo_core import RollbackOutcome

LIST_LIMIT = 50
OUTCOME_CHOICES = [
    ("", "any"),
    (RollbackOutcome.CLEAN.value, "rolled back cleanly"),
    (RollbackOutcome.WITH_EXCEPTIONS.value, "with exceptions (rejected, resolved, left, in doubt)"),
]
SINCE_CHOICES = [
    ("", "any time"),
    ("1h", "last hour"),
    ("24h", "last 24 hours"),
    ("7d", "last 7 days"),
]
COLUMNS = [("started", "Started"), ("updated", "Updated"), ("duration", "Duration")]


@dataclass(frozen=True)
class SortHeader:
    """A sortable column's header: its link and ``aria-sort`` (``none`` when not sorted)."""

    label: str
    href: str
    aria_sort: str


def context(
    request: HttpRequest,
    projects: list[Project],
    search: saga_search.SagaFilter,
    *,
    rows: list[Saga] | None = None,
    next_cursor: str | None = None,
    error: str = "",
) -> dict[str, Any]:
    query = search.to_query()
    last_log_id = visible.last_event_id()
    live = search.live_params() if not request.GET.get("cursor") and not error else None
    if live is not None:  # only the first page of a newest-first list changes live
        params = QueryDict(mutable=True)
        params.update({"list": "1", "after": str(last_log_id), **live})
        live_query: str | None = params.urlencode()
    else:
        live_query = None
    return {
        "sagas": rows or [],
        "next_cursor": next_cursor,
        "projects": projects,
        "search": search,
        "statuses": saga_search.STATUS_CHOICES,
        "outcomes": OUTCOME_CHOICES,
        "since_choices": SINCE_CHOICES,
        "quick_ranges": _quick_ranges(search),
        "times": {name: _local(getattr(search, name)) for name in saga_search.TIME_FIELDS},
        "bar": search.bar(),
        "json_texts": [c.text() for c in search.bar_json()] or [""],
        "headers": {sort: _header(search, sort, label) for sort, label in COLUMNS},
        "query": query.urlencode(),
        "saved_views": saved_views.for_user(request.user, projects),
        "error": error,
        "last_log_id": last_log_id,
        "live_query": live_query,
        "live_off": live is None and not error,
        "limit": LIST_LIMIT,
    }


def _header(search: saga_search.SagaFilter, sort: str, label: str) -> SortHeader:
    current = search.sort == sort
    aria = ("descending" if search.order == "desc" else "ascending") if current else "none"
    return SortHeader(label, "?" + search.sorted_by(sort).to_query().urlencode(), aria)


def _quick_ranges(search: saga_search.SagaFilter) -> list[tuple[str, str, bool]]:
    found = []
    for value, label in SINCE_CHOICES[1:]:
        query = search.to_query()
        for name in ("updated_after", "updated_before"):
            query.pop(name, None)
        query["since"] = value
        found.append((label, "?" + query.urlencode(), search.since == value))
    return found


def _local(at: datetime | None) -> str:
    """A time as a ``datetime-local`` input shows it (UTC, to the second)."""
    return at.strftime("%Y-%m-%dT%H:%M:%S") if at is not None else ""

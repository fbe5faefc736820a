"""What the saga list page shows around its rows: the filter bar's values, sort headers,
quick ranges, saved views and the live feed's query. Views stay thin; templates lay out."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.http import HttpRequest, QueryDict
from django.urls import reverse

from sagaboard.collab.reads import saved_views
from sagaboard.models import Project, Saga
from sagaboard.search.reads import saga_search
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
CHIP_NAMES = {
    "project": "Project",
    "status": "Status",
    "outcome": "Outcome",
    "waiting": "Waiting",
    "tool": "Tool",
    "error": "Error",
    "json": "Input/output",
    "actor": "Actor",
    "owner": "Owner",
    "since": "Updated",
    "started_after": "Started after",
    "started_before": "Started before",
    "updated_after": "Updated after",
    "updated_before": "Updated before",
}
"""Each filter of the bar (a query parameter) as its chip names it, in the order chips are
shown; the box (``q``) and the sort are not chips: the box shows itself, the sort its
column header."""
KEPT = ("q", "sort", "order")


@dataclass(frozen=True)
class Chip:
    """A filter that is on: what it says, and the list without it."""

    label: str
    href: str


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
    last_log_id: int,
    rows: list[Saga] | None = None,
    next_cursor: str | None = None,
    error: str = "",
) -> dict[str, Any]:
    query = search.to_query()
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
        "chips": _chips(query),
        "clear_href": _href(QueryDict(mutable=True), query, KEPT),
        "query": query.urlencode(),
        "saved_views": saved_views.for_user(request.user, projects),
        "error": error,
        "last_log_id": last_log_id,
        "live_query": live_query,
        "live_off": live is None and not error,
        "limit": LIST_LIMIT,
    }


_SHOWN = {
    **{value: text for value, text in saga_search.STATUS_CHOICES},
    **{value: text for value, text in OUTCOME_CHOICES if value},
    **{value: text for value, text in SINCE_CHOICES if value},
}


def _chips(query: QueryDict) -> list[Chip]:
    """The filters that are on (the list's canonical query), each with a link to the list
    without it; the box's text and the sort stay."""
    chips = []
    order = list(CHIP_NAMES)
    for name, values in sorted(query.lists(), key=lambda item: _place(order, item[0])):
        if name in KEPT:
            continue
        for value in values:
            named = name in ("status", "outcome", "since")  # a choice: shown by its text
            if name == "waiting":
                label = "Waiting for a person"
            else:
                shown = _SHOWN.get(value, value) if named else value
                label = f"{CHIP_NAMES.get(name, name)}: {shown}"
            rest = QueryDict(mutable=True)
            for other, others in query.lists():
                rest.setlist(other, [v for v in others if (other, v) != (name, value)])
            chips.append(Chip(label, _href(rest)))
    return chips


def _place(order: list[str], name: str) -> int:
    return order.index(name) if name in order else len(order)


def _href(query: QueryDict, source: QueryDict | None = None, names: tuple[str, ...] = ()) -> str:
    """The list's address with ``query`` (plus ``names`` taken from ``source``)."""
    for name in names:
        if source is not None and name in source:
            query.setlist(name, source.getlist(name))
    encoded = query.urlencode()
    return reverse("saga_list") + (f"?{encoded}" if encoded else "")


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
    """A time as a ``datetime-local`` input shows it (UTC, to the second; four-digit year)."""
    return f"{at.year:04d}-{at:%m-%dT%H:%M:%S}" if at is not None else ""

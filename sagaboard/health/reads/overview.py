"""Reads for the overview page: counts, what needs a human, recent failures, throughput.

Everything here must stay cheap at a million sagas, and true: the counts and the charts
read the rollup (``models.overview``: per project, sagas per status now, and sagas that
came to rest per 5 minutes), which the database's triggers keep in the writers' own
transactions, so they are exactly what a count of the sagas would give, whatever their
number; the lists are index-ordered ``LIMIT`` queries. Counts are still cached for ten
seconds (the live feed reads them fresh) and the charts for a minute per set of projects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.cache import cache
from django.utils import timezone

from sagaboard.models import Project, Saga, SagaCount, SagaCountChange, Step
from sagaboard.models.overview import CLEAN, FIVE_MINUTES, TOTALS, WAITING, fold_changes
from undo_core import RollbackOutcome, SagaStatus, StepState

THROUGHPUT_CACHE_SECONDS = 60
COUNTS_CACHE_SECONDS = 10
ATTENTION_STEP_STATES = [StepState.ROLLBACK_FAILED, StepState.AWAITING_APPROVAL, StepState.IN_DOUBT]
FAILED_SAGA_STATUSES = [SagaStatus.ROLLBACK_FAILED, SagaStatus.ROLLED_BACK, SagaStatus.FAILED]


@dataclass(frozen=True)
class StatusCount:
    status: str
    count: int
    capped: bool
    """True when there are at least ``count`` (the walk stopped at the cap)."""
    label: str = ""
    """What the chip says (the status, unless it is one of the rollback outcomes)."""
    query: str = ""
    """The saga list's filter for these sagas."""
    css: str = ""


def status_counts(
    projects: Sequence[Project], *, cap: int | None = None, fresh: bool = False
) -> list[StatusCount]:
    """Sagas per status (and the rollback outcomes, and those waiting for a person): exact,
    from the rollup, one query. ``cap`` shows at most that many ("10,000+").

    Cached for ``COUNTS_CACHE_SECONDS``: counts that are seconds old still say where
    things stand, and a page left open and reloaded costs nothing. ``fresh`` reads
    them again (the live overview, sent because something just changed).
    """
    ids = sorted(p.pk for p in projects)
    key = f"sagaboard:counts:{cap}:{','.join(map(str, ids))}"
    found: list[StatusCount] | None = None if fresh else cache.get(key)
    if found is None:
        fold_changes()  # PostgreSQL: keeps the pending changes few (read below all the same)
        found = _status_counts(ids, cap)
        cache.set(key, found, COUNTS_CACHE_SECONDS)
    return found


def _status_counts(ids: list[int], cap: int | None) -> list[StatusCount]:
    # ROLLED_BACK is counted as two: clean, and with exceptions (an undo rejected, resolved
    # by hand...), which must never be read as a clean rollback. And one more count: the
    # sagas whose rollback waits for a person.
    totals: dict[str, int] = {}
    for name, _start, n in _rollup(ids, TOTALS):
        totals[name] = totals.get(name, 0) + n

    def count(key: str, label: str, query: str, counted: str) -> StatusCount:
        n = totals.get(counted, 0)
        shown = n if cap is None else min(n, cap)
        return StatusCount(key, shown, cap is not None and n > cap, label, query, key.lower())

    counts = []
    for status in SagaStatus:
        if status is SagaStatus.ROLLED_BACK:
            counts.append(
                count(status.value, "ROLLED_BACK (clean)", "status=ROLLED_BACK&outcome=CLEAN",
                      CLEAN)
            )  # fmt: skip
            with_exceptions = series(status, RollbackOutcome.WITH_EXCEPTIONS)
            counts.append(
                count(with_exceptions, "ROLLED BACK with exceptions",
                      "status=ROLLED_BACK&outcome=WITH_EXCEPTIONS", with_exceptions)
            )  # fmt: skip
        else:
            counts.append(count(status.value, status.value, f"status={status.value}", status))
    counts.append(count("WAITING", "waiting for a person", "waiting=1", WAITING))
    return counts


def _rollup(
    ids: list[int], span: int, since: datetime | None = None, until: datetime | None = None
) -> list[tuple[str, datetime, int]]:
    """(key, bucket start, n) of the projects' rollup rows of one span: the folded counts
    and, in the same statement (one snapshot), the changes not folded yet."""
    parts = []
    for model in (SagaCount, SagaCountChange):
        rows = model.objects.filter(project_id__in=ids, span=span)
        if since is not None and until is not None:
            rows = rows.filter(bucket_start__gte=since, bucket_start__lt=until)
        parts.append(rows.values_list("key", "bucket_start", "n").order_by())
    return list(parts[0].union(parts[1], all=True))


def steps_needing_attention(projects: Sequence[Project], *, limit: int = 20) -> list[Step]:
    """Undos that wait for a person: failed, awaiting approval, or in doubt; oldest first.

    One short query per state, merged (as ``recent_failures``): each walks the
    (state, changed_at) index from its oldest end. With ``state IN (...)`` SQLite
    scans every saga to join from, and PostgreSQL sorts every matching step; both
    grow with the table (the page benchmark measured 250 ms at 400,000 steps).
    Oldest by the server's clock: since the server stored the step's move, not since
    the time its agent reported.
    """
    rows = [
        step
        for state in ATTENTION_STEP_STATES
        # A failed undo an operator left waits for nobody (rollback_outcomes.waits_for_operator).
        for step in Step.objects.filter(state=state, saga__project__in=projects, left_at=None)
        .select_related("saga__project")
        .order_by("changed_at", "pk")[:limit]
    ]
    return sorted(rows, key=lambda s: (s.changed_at, s.pk))[:limit]


def recent_failures(projects: Sequence[Project], *, limit: int = 10) -> list[Saga]:
    """The newest sagas that did not complete (rolled back, rollback failed, failed).

    One short query per status, merged: each walks the (project, status, -changed_at)
    index from its top, where ``status IN (...)`` would sort every failed saga first.
    Newest by the server's clock (``changed_at``).
    """
    rows = [
        saga
        for status in FAILED_SAGA_STATUSES
        for saga in Saga.objects.filter(project__in=projects, status=status)
        .select_related("project")
        .order_by("-changed_at", "-id")[:limit]
    ]
    return sorted(rows, key=lambda s: (s.changed_at, s.pk), reverse=True)[:limit]


@dataclass(frozen=True)
class Bucket:
    start: datetime
    by_status: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_status.values())


WINDOWS = {
    "hour": (timedelta(hours=1), timedelta(minutes=5)),
    "day": (timedelta(days=1), timedelta(hours=1)),
}


def throughput(
    projects: Sequence[Project], window: str, *, now: datetime | None = None
) -> list[Bucket]:
    """Sagas that came to rest per bucket (5 min over the last hour, 1 h over the day), by status.

    Bucketed by when the server stored the change (``changed_at``), not the agent's time;
    read from the rollup's 5-minute rows (at most 288 per series for the day), one query.

    Cached for a minute: a chart that is a minute old still answers "is something wrong
    right now?", and the page says it is refreshed every minute.
    """
    ids = sorted(p.pk for p in projects)
    key = f"sagaboard:throughput:{window}:{','.join(map(str, ids))}"
    found: list[Bucket] | None = cache.get(key)
    if found is None:
        found = _throughput(ids, window, now or timezone.now())
        cache.set(key, found, THROUGHPUT_CACHE_SECONDS)
    return found


def _throughput(project_ids: list[int], window: str, now: datetime) -> list[Bucket]:
    span, step = WINDOWS[window]
    end = _floor(now, step) + step
    start = end - span
    buckets = [Bucket(start + i * step, {}) for i in range(int(span / step))]
    for key, bucket_start, n in _rollup(project_ids, FIVE_MINUTES, start, end):
        index = int((bucket_start - start) / step)
        if 0 <= index < len(buckets) and n:
            counts = buckets[index].by_status
            counts[key] = counts.get(key, 0) + n
    for bucket in buckets:  # a series whose sagas all moved on since: none
        for key in [k for k, n in bucket.by_status.items() if not n]:
            del bucket.by_status[key]
    return buckets


def series(status: str, outcome: str | None) -> str:
    """The chart series a saga that ended counts in: ROLLED_BACK is split by its outcome."""
    if status == SagaStatus.ROLLED_BACK and outcome == RollbackOutcome.WITH_EXCEPTIONS:
        return "ROLLED_BACK_WITH_EXCEPTIONS"
    return status


def _floor(moment: datetime, step: timedelta) -> datetime:
    seconds = int(step.total_seconds())
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=moment.tzinfo)

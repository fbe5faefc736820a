"""Reads for the overview page: counts, what needs a human, recent failures, throughput.

Everything here must stay cheap at a million sagas: counts are capped (an
index walk stops at ``COUNT_CAP`` rows, the page shows "10,000+", and they are
cached for ten seconds), lists are index-ordered ``LIMIT`` queries, and the
throughput chart, which must scan a day of rows, is cached for a minute per set
of projects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.cache import cache
from django.db.models import Count
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone

from sagaboard.models import Project, Saga, Step
from undo_core import RollbackOutcome, SagaStatus, StepState

COUNT_CAP = 10_000
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
    projects: Sequence[Project], *, cap: int = COUNT_CAP, fresh: bool = False
) -> list[StatusCount]:
    """Sagas per status, each count capped: one short index walk per status, never a scan.

    Cached for ``COUNTS_CACHE_SECONDS``: counts that are seconds old still say where
    things stand, and a page left open and reloaded costs nothing. ``fresh`` reads
    them again (the live overview, sent because something just changed).
    """
    ids = sorted(p.pk for p in projects)
    key = f"sagaboard:counts:{cap}:{','.join(map(str, ids))}"
    found: list[StatusCount] | None = None if fresh else cache.get(key)
    if found is None:
        found = _status_counts(ids, cap)
        cache.set(key, found, COUNTS_CACHE_SECONDS)
    return found


def _status_counts(ids: list[int], cap: int) -> list[StatusCount]:
    # ROLLED_BACK is counted as two: clean, and with exceptions (an undo rejected, resolved
    # by hand...), which must never be read as a clean rollback. And one more count: the
    # sagas whose rollback waits for a person. Each walks an index of its own.
    def count(key: str, label: str, query: str, **match: object) -> StatusCount:
        n = Saga.objects.filter(project_id__in=ids, **match).values("pk")[: cap + 1].count()
        return StatusCount(key, min(n, cap), n > cap, label, query, key.lower())

    counts = []
    for status in SagaStatus:
        if status is SagaStatus.ROLLED_BACK:
            counts.append(
                count(status.value, "ROLLED_BACK (clean)", "status=ROLLED_BACK&outcome=CLEAN",
                      outcome=RollbackOutcome.CLEAN)
            )  # fmt: skip
            counts.append(
                count("ROLLED_BACK_WITH_EXCEPTIONS", "ROLLED BACK with exceptions",
                      "status=ROLLED_BACK&outcome=WITH_EXCEPTIONS",
                      outcome=RollbackOutcome.WITH_EXCEPTIONS, status=status)
            )  # fmt: skip
        else:
            counts.append(
                count(status.value, status.value, f"status={status.value}", status=status)
            )
    counts.append(count("WAITING", "waiting for a person", "waiting=1", waiting_for__isnull=False))
    return counts


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

    Bucketed by when the server stored the change (``changed_at``), not the agent's time.

    Cached for a minute: the chart scans the window's rows, and a chart that is
    a minute old still answers "is something wrong right now?".
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
    trunc = TruncMinute("changed_at") if step < timedelta(hours=1) else TruncHour("changed_at")
    rows = (
        Saga.objects.filter(project_id__in=project_ids, changed_at__gte=start, status__in=_RESTING)
        .annotate(t=trunc)
        .values("t", "status", "outcome")
        .annotate(n=Count("pk"))
        .order_by()
    )
    buckets = [Bucket(start + i * step, {}) for i in range(int(span / step))]
    for row in rows:
        index = int((row["t"] - start) / step)
        if 0 <= index < len(buckets):
            counts = buckets[index].by_status
            key = series(row["status"], row["outcome"])
            counts[key] = counts.get(key, 0) + row["n"]
    return buckets


_RESTING = [SagaStatus.COMPLETED, *FAILED_SAGA_STATUSES]


def series(status: str, outcome: str | None) -> str:
    """The chart series a saga that ended counts in: ROLLED_BACK is split by its outcome."""
    if status == SagaStatus.ROLLED_BACK and outcome == RollbackOutcome.WITH_EXCEPTIONS:
        return "ROLLED_BACK_WITH_EXCEPTIONS"
    return status


def _floor(moment: datetime, step: timedelta) -> datetime:
    seconds = int(step.total_seconds())
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=moment.tzinfo)

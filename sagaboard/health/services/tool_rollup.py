"""Keep the per-tool rollups (``ToolRollup``) up to date, off ingestion's hot path.

**What counts.** For each step: its forward call once it ended (any state but
``PENDING``), a failure if the step is ``FAILED``, its duration from ``created_at`` to
``completed_at`` (a failure: to ``updated_at``); for each undo attempt: a run, a
failure unless it succeeded (failed, timed out, interrupted), its duration from
``started_at`` to ``finished_at``. A negative or missing duration counts the run but
not its time. Runs land in the bucket of their start (``models.tool_health.ToolRollup``).

**How it folds.** Ingestion only stamps ``Saga.changed_at`` (the server's clock) as it
always did; nothing is added to its transaction. A fold walks, project by project, the
sagas changed since the watermark (the ``(project, -changed_at, -id)`` index, in keyset
chunks, each its own transaction), re-reads each changed saga's steps and attempts, and
applies the difference between what they contribute now and what they contributed when
last folded (``ToolRollupMark``, one row per saga). So folding is idempotent: a saga
folded twice, or a step that changed after it was counted (completed, then undone),
is counted once, as it now is. A saga whose ``changed_at`` equals its mark's is skipped
without reading its steps.

The walk starts ``OVERLAP`` before the watermark: a writer's transaction stamps
``changed_at`` before it commits, so a change may become visible after a fold passed
its time; any commit within ``OVERLAP`` of its stamp is still folded next time.

**Who runs it.** The Celery beat task ``sagaboard.tasks.tool_rollup_fold`` every
``SAGABOARD_ROLLUP_SECONDS`` (default 30) and ``manage.py sagaboard_rollup``. Two folds
at once are safe: each chunk first updates the cursor row, which serialises the chunks
(a row lock on PostgreSQL; SQLite's IMMEDIATE transactions), and reads the marks after.

**Retention.** Deleting a saga (``health.services.retention``) deletes its mark with it (cascade)
and keeps its counts in the rollups: health is history, and "runs last week" does not
drop because old sagas were cleaned up. Rollup rows themselves are pruned by the fold
once older than the longest window they serve (``KEEP``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from sagaboard.models import (
    CompensationAttempt,
    Project,
    Saga,
    Step,
    ToolRollup,
    ToolRollupCursor,
    ToolRollupMark,
)
from sagaboard.models.tool_health import FIVE_MINUTES, GRANULARITIES, duration_bin
from undo_core import AttemptOutcome, StepState

__all__ = ["CHUNK", "KEEP", "OVERLAP", "FoldReport", "rollup_fold", "saga_contribution"]

OVERLAP = timedelta(minutes=2)
"""How far before the watermark each fold starts again (see the module doc)."""
CHUNK = 500
"""Sagas per transaction."""
KEEP = {FIVE_MINUTES: timedelta(days=2), 3600: timedelta(days=9)}
"""How long rollup rows of each granularity are kept: the longest window they serve
(an hour of 5-minute rows, a week of hourly rows) with a margin."""

Key = tuple[str, int]
"""(tool name, bucket start as a Unix time, floored to 5 minutes)."""


@dataclass
class FoldReport:
    """What one fold did."""

    sagas_seen: int = 0
    """Sagas changed since the watermark (less the overlap)."""
    sagas_folded: int = 0
    """Those whose steps were read again (the others had not changed since their mark)."""
    steps: int = 0
    attempts: int = 0
    buckets: int = 0
    """Rollup rows written."""
    pruned: int = 0
    watermark: datetime | None = None
    seconds: float = 0.0

    def counts(self) -> dict[str, Any]:
        return {
            "sagas_seen": self.sagas_seen,
            "sagas_folded": self.sagas_folded,
            "steps": self.steps,
            "attempts": self.attempts,
            "buckets": self.buckets,
            "pruned": self.pruned,
            "watermark": self.watermark.isoformat() if self.watermark else None,
            "seconds": round(self.seconds, 3),
        }


def rollup_fold(
    *, now: datetime | None = None, chunk: int = CHUNK, rebuild: bool = False
) -> FoldReport:
    """Fold every saga changed since the last fold into the rollups; returns the counts.

    ``rebuild``: walk every saga from the start (still idempotent: unchanged sagas are
    skipped by their marks). ``now`` is the server's time the walk stops at.
    """
    if chunk < 1:
        raise ValueError("chunk must be at least 1")
    began = time.monotonic()
    now = now or timezone.now()
    cursor, _ = ToolRollupCursor.objects.get_or_create(pk=1)
    since = None if rebuild or cursor.watermark is None else cursor.watermark - OVERLAP
    report = FoldReport()
    for project_id in Project.objects.order_by("pk").values_list("pk", flat=True):
        _fold_project(project_id, since, now, chunk, report)
    with transaction.atomic():
        ToolRollupCursor.objects.filter(Q(watermark__lt=now) | Q(watermark=None), pk=1).update(
            watermark=now
        )
        report.pruned = _prune(now)
    report.watermark = now
    report.seconds = time.monotonic() - began
    return report


def _fold_project(
    project_id: int, since: datetime | None, now: datetime, chunk: int, report: FoldReport
) -> None:
    after: tuple[datetime, int] | None = None
    while True:
        with transaction.atomic():
            # First a write to the cursor row: chunks of two folds never interleave.
            ToolRollupCursor.objects.filter(pk=1).update(locked_at=timezone.now())
            picked = _changed(project_id, since, now, after, chunk)
            if not picked:
                return
            report.sagas_seen += len(picked)
            _fold_chunk(project_id, picked, report)
        after = picked[-1][1], picked[-1][0]


def _changed(
    project_id: int,
    since: datetime | None,
    now: datetime,
    after: tuple[datetime, int] | None,
    limit: int,
) -> list[tuple[int, datetime]]:
    """The next ``limit`` sagas of the project changed in (since, now]: (pk, changed_at)."""
    qs = Saga.objects.filter(project_id=project_id, changed_at__lte=now)
    if since is not None:
        qs = qs.filter(changed_at__gt=since)
    if after is not None:
        at, pk = after
        qs = qs.filter(Q(changed_at__gt=at) | Q(changed_at=at, pk__gt=pk), changed_at__gte=at)
    return list(qs.order_by("changed_at", "pk").values_list("pk", "changed_at")[:limit])


def _fold_chunk(project_id: int, picked: list[tuple[int, datetime]], report: FoldReport) -> None:
    changed = dict(picked)
    marks = {m.saga_id: m for m in ToolRollupMark.objects.filter(saga_id__in=list(changed))}
    todo = [pk for pk, at in picked if pk not in marks or marks[pk].changed_at != at]
    if not todo:
        return
    report.sagas_folded += len(todo)
    fresh = _contributions(todo, report)
    delta: dict[Key, list[Any]] = {}
    for pk in todo:
        old = marks[pk].contribution if pk in marks else []
        _add(delta, old, -1)
        _add(delta, _as_rows(fresh.get(pk, {})), +1)
    report.buckets += _apply(project_id, delta, timezone.now())
    ToolRollupMark.objects.filter(saga_id__in=todo).delete()
    ToolRollupMark.objects.bulk_create(
        ToolRollupMark(saga_id=pk, changed_at=changed[pk], contribution=_as_rows(fresh.get(pk, {})))
        for pk in todo
    )


def _contributions(saga_pks: list[int], report: FoldReport) -> dict[int, dict[Key, list[Any]]]:
    """Each saga's contribution as its steps and attempts stand now: saga pk -> key -> row."""
    columns = ("pk", "saga_id", "tool_name", "state", "created_at", "updated_at",
               "completed_at", "changed_at")  # fmt: skip
    steps = list(Step.objects.filter(saga_id__in=saga_pks).values_list(*columns))
    report.steps += len(steps)
    by_step = {row[0]: row for row in steps}
    found: dict[int, dict[Key, list[Any]]] = defaultdict(dict)
    for _, saga_pk, tool, state, created, updated, completed, changed in steps:
        if state == StepState.PENDING:
            continue
        end = updated if state == StepState.FAILED else completed
        _count(found[saga_pk], tool, min(created or changed, changed), 0, state == StepState.FAILED,
               _ms(created, end))  # fmt: skip
    attempts = CompensationAttempt.objects.filter(step__saga_id__in=saga_pks).values_list(
        "step_id", "started_at", "finished_at", "outcome"
    )
    for step_pk, started, finished, outcome in attempts:
        report.attempts += 1
        _, saga_pk, tool, *_, changed = by_step[step_pk]
        failed = outcome != AttemptOutcome.SUCCEEDED
        _count(found[saga_pk], tool, min(started, changed), 2, failed, _ms(started, finished))
    return found


def saga_contribution(saga_pk: int) -> list[list[Any]]:
    """One saga's contribution as stored in its mark (for tests and checks)."""
    return _as_rows(_contributions([saga_pk], FoldReport()).get(saga_pk, {}))


def _ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    ms = (end - start).total_seconds() * 1000
    return ms if ms >= 0 else None


def _count(
    into: dict[Key, list[Any]], tool: str, at: datetime, offset: int, failed: bool, ms: float | None
) -> None:
    """One run (forward: ``offset`` 0, undo: 2) in the bucket of ``at``."""
    epoch = int(at.timestamp())
    row = into.setdefault((tool, epoch - epoch % FIVE_MINUTES), [0, 0, 0, 0, {}, {}])
    row[offset] += 1
    row[offset + 1] += int(failed)
    if ms is not None:
        hist = row[4 + offset // 2]
        b = str(duration_bin(ms))
        hist[b] = hist.get(b, 0) + 1


def _as_rows(by_key: dict[Key, list[Any]]) -> list[list[Any]]:
    return [[tool, epoch, *values] for (tool, epoch), values in sorted(by_key.items())]


def _add(delta: dict[Key, list[Any]], rows: Iterable[list[Any]], sign: int) -> None:
    for tool, epoch, *values in rows:
        row = delta.setdefault((tool, epoch), [0, 0, 0, 0, {}, {}])
        for i in range(4):
            row[i] += sign * values[i]
        for i in (4, 5):
            for b, n in values[i].items():
                row[i][b] = row[i].get(b, 0) + sign * n


def _apply(project_id: int, delta: dict[Key, list[Any]], now: datetime) -> int:
    """Add ``delta`` (5-minute keys) to the project's rollup rows of every granularity.

    Buckets already past ``KEEP`` are left out: they were pruned, or soon will be."""
    wanted: dict[tuple[str, int, datetime], list[Any]] = {}
    for (tool, epoch), values in delta.items():
        if not any(values[:4]) and not any(values[4].values()) and not any(values[5].values()):
            continue  # unchanged
        for g in GRANULARITIES:
            start = datetime.fromtimestamp(epoch - epoch % g, tz=UTC)
            if start < now - KEEP[g]:
                continue
            row = wanted.setdefault((tool, g, start), [0, 0, 0, 0, {}, {}])
            _add_values(row, values)
    if not wanted:
        return 0
    existing = {
        (r.tool_name, r.granularity, r.bucket_start.astimezone(UTC)): r
        for r in ToolRollup.objects.filter(
            project_id=project_id,
            tool_name__in={k[0] for k in wanted},
            granularity__in=GRANULARITIES,
            bucket_start__in={k[2] for k in wanted},
        )
    }
    updated: list[ToolRollup] = []
    created: list[ToolRollup] = []
    for (tool, g, start), values in wanted.items():
        rollup = existing.get((tool, g, start))
        if rollup is None:
            rollup = ToolRollup(project_id=project_id, tool_name=tool, granularity=g,
                                bucket_start=start)  # fmt: skip
            created.append(rollup)
        else:
            updated.append(rollup)
        rollup.runs += values[0]
        rollup.failures += values[1]
        rollup.undo_runs += values[2]
        rollup.undo_failures += values[3]
        rollup.forward_hist = _merged(rollup.forward_hist, values[4])
        rollup.undo_hist = _merged(rollup.undo_hist, values[5])
    fields = ["runs", "failures", "undo_runs", "undo_failures", "forward_hist", "undo_hist"]
    if updated:
        ToolRollup.objects.bulk_update(updated, fields, batch_size=500)
    if created:
        ToolRollup.objects.bulk_create(created, batch_size=500)
    return len(updated) + len(created)


def _add_values(row: list[Any], values: list[Any]) -> None:
    for i in range(4):
        row[i] += values[i]
    for i in (4, 5):
        for b, n in values[i].items():
            row[i][b] = row[i].get(b, 0) + n


def _merged(hist: dict[str, int], delta: dict[str, int]) -> dict[str, int]:
    out = dict(hist)
    for b, n in delta.items():
        total = out.get(b, 0) + n
        if total:
            out[b] = total
        else:
            out.pop(b, None)
    return dict(sorted(out.items(), key=lambda item: int(item[0])))


def _prune(now: datetime) -> int:
    deleted = 0
    for g, keep in KEEP.items():
        n, _ = ToolRollup.objects.filter(granularity=g, bucket_start__lt=now - keep).delete()
        deleted += n
    return deleted

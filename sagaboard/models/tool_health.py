"""Per-tool health, rolled up: counts and duration histograms per tool per time bucket.

The health pages read these rows, never the steps: at a million steps a scan per page
is too slow, while a week of hourly buckets is a few hundred rows per tool.
``sagaboard.health.services.tool_rollup`` keeps them up to date from the steps and attempts.

Durations are kept as histograms with fixed log-scale bins (``duration_bin``), so the
p50 / p95 of any window are read from the sum of its buckets' histograms: exact to
the bin (a factor of sqrt(2), about 41 %, per bin), whatever the number of runs.
"""

from __future__ import annotations

import math

from django.db import models

from sagaboard.models.fields import JSONTextField
from sagaboard.models.projects import Project
from sagaboard.models.sagas import Saga

BINS = 64
"""Bin 0: under 1 ms; bin k (1..62): [2^((k-1)/2), 2^(k/2)) ms; bin 63: everything longer
(from 2^31 ms, about 25 days)."""

FIVE_MINUTES = 300
HOUR = 3600
GRANULARITIES = (FIVE_MINUTES, HOUR)
"""Bucket sizes kept, in seconds: 5 minutes (the hour's chart) and hours (day and week)."""


def duration_bin(ms: float) -> int:
    """The histogram bin of a duration in milliseconds (ratio sqrt(2) between bin edges)."""
    if ms < 1:
        return 0
    return min(1 + int(2 * math.log2(ms)), BINS - 1)


def bin_bounds(index: int) -> tuple[float, float]:
    """The bin's [low, high) in milliseconds (the last bin's high is infinity)."""
    if index <= 0:
        return 0.0, 1.0
    low = 2 ** ((index - 1) / 2)
    return low, (math.inf if index >= BINS - 1 else 2 ** (index / 2))


def bin_value(index: int) -> float:
    """The one duration a bin stands for: the geometric middle of its edges (ms)."""
    low, high = bin_bounds(index)
    if index <= 0:
        return 0.5
    return low if math.isinf(high) else math.sqrt(low * high)


class ToolRollup(models.Model):
    """One tool's runs in one project over one bucket of time (5 minutes or an hour).

    ``bucket_start`` is when the forward call started (``Step.created_at``) or the undo
    attempt started (``started_at``), floored to the bucket, and never later than the
    server stored the step (``Step.changed_at``): an agent's clock that runs ahead
    cannot park runs in the future.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    tool_name = models.CharField(max_length=200)
    granularity = models.PositiveIntegerField()
    """The bucket's length in seconds (``GRANULARITIES``)."""
    bucket_start = models.DateTimeField()
    runs = models.BigIntegerField(default=0)
    """Forward calls that ended (completed or failed)."""
    failures = models.BigIntegerField(default=0)
    """Forward calls that failed (the step is FAILED)."""
    undo_runs = models.BigIntegerField(default=0)
    """Undo attempts (each try of a compensation counts once)."""
    undo_failures = models.BigIntegerField(default=0)
    """Undo attempts that failed, timed out or were interrupted."""
    forward_hist = JSONTextField(default=dict)
    """Forward durations: {bin: count} (``duration_bin``)."""
    undo_hist = JSONTextField(default=dict)
    """Undo attempt durations: {bin: count}."""

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "tool_name", "granularity", "bucket_start"],
                name="tool_rollup_unique",
            )
        ]
        indexes = [
            models.Index(
                fields=["project", "granularity", "bucket_start"], name="tool_rollup_window"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} @ {self.bucket_start} ({self.granularity} s)"


class ToolRollupMark(models.Model):
    """What one saga's steps added to the rollups when last folded, and as of which change.

    Folding a saga again subtracts this and adds its steps' contribution as they are now,
    so a step that changed (completed, then undone) is never counted twice. Deleted with
    its saga (retention): the rollups keep the counts, history outlives the rows.
    """

    saga = models.OneToOneField(Saga, primary_key=True, on_delete=models.CASCADE, related_name="+")
    changed_at = models.DateTimeField()
    """The saga's ``changed_at`` this contribution was read at: equal means nothing new."""
    contribution = JSONTextField(default=list)
    """[[tool, bucket epoch (5 min), runs, failures, undo_runs, undo_failures,
    {forward bin: n}, {undo bin: n}], ...]"""


class ToolRollupCursor(models.Model):
    """The fold's watermark (one row): sagas changed after it, by the server's clock, are
    folded next. Its row is also the fold's lock (each chunk updates it first)."""

    watermark = models.DateTimeField(null=True, blank=True)
    locked_at = models.DateTimeField(null=True, blank=True)

"""Per-tool health for the caller's projects, read from the rollups (never from the steps).

A window is the last hour (5-minute buckets), day (hourly) or week (hourly rows drawn as
6-hour bars). Percentiles come from the sum of the buckets' histograms, so they are exact
to a histogram bin (``sagaboard.models.tool_health``): a "p95 of 180 ms" means the 95th
percentile run lies in the bin around 180 ms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from sagaboard.models import Project, ToolRollup
from sagaboard.models.tool_health import FIVE_MINUTES, HOUR, bin_value


@dataclass(frozen=True)
class Window:
    name: str
    label: str
    span: timedelta
    granularity: int
    """The rollup rows read (seconds)."""
    bar: timedelta
    """One chart bar."""


WINDOWS = {
    w.name: w
    for w in (
        Window("hour", "last hour", timedelta(hours=1), FIVE_MINUTES, timedelta(minutes=5)),
        Window("day", "last 24 hours", timedelta(days=1), HOUR, timedelta(hours=1)),
        Window("week", "last 7 days", timedelta(days=7), HOUR, timedelta(hours=6)),
    )
}
DEFAULT_WINDOW = "day"


def percentile(hist: dict[str, int], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1, nearest rank) of a histogram, in ms; None if empty."""
    total = sum(hist.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for b, n in sorted(((int(b), n) for b, n in hist.items()), key=lambda item: item[0]):
        seen += n
        if seen >= rank:
            return bin_value(b)
    return None  # unreachable with non-negative counts


@dataclass
class Health:
    """Counts and percentiles of one tool (or one bucket of it)."""

    tool_name: str = ""
    runs: int = 0
    failures: int = 0
    undo_runs: int = 0
    undo_failures: int = 0
    forward_hist: dict[str, int] = field(default_factory=dict)
    undo_hist: dict[str, int] = field(default_factory=dict)
    start: datetime | None = None

    def add(self, row: ToolRollup) -> None:
        self.runs += row.runs
        self.failures += row.failures
        self.undo_runs += row.undo_runs
        self.undo_failures += row.undo_failures
        for hist, more in ((self.forward_hist, row.forward_hist), (self.undo_hist, row.undo_hist)):
            for b, n in more.items():
                hist[b] = hist.get(b, 0) + n

    @property
    def failure_rate(self) -> float | None:
        return self.failures / self.runs if self.runs else None

    @property
    def undo_failure_rate(self) -> float | None:
        return self.undo_failures / self.undo_runs if self.undo_runs else None

    @property
    def forward_p50(self) -> float | None:
        return percentile(self.forward_hist, 0.5)

    @property
    def forward_p95(self) -> float | None:
        return percentile(self.forward_hist, 0.95)

    @property
    def undo_p50(self) -> float | None:
        return percentile(self.undo_hist, 0.5)

    @property
    def undo_p95(self) -> float | None:
        return percentile(self.undo_hist, 0.95)


def _bounds(window: Window, now: datetime) -> tuple[datetime, datetime]:
    """[start, end) of the window: whole bars, the last one holding ``now``."""
    bar = int(window.bar.total_seconds())
    epoch = int(now.timestamp())
    end = datetime.fromtimestamp(epoch - epoch % bar + bar, tz=UTC)
    return end - window.span, end


def _rows(
    projects: Sequence[Project], window: Window, now: datetime, tool: str | None = None
) -> Iterable[ToolRollup]:
    if not projects:
        return []
    start, end = _bounds(window, now)
    qs = ToolRollup.objects.filter(
        project_id__in=[p.pk for p in projects],
        granularity=window.granularity,
        bucket_start__gte=start,
        bucket_start__lt=end,
    )
    if tool is not None:
        qs = qs.filter(tool_name=tool)
    return qs.only(
        "tool_name", "bucket_start", "runs", "failures", "undo_runs", "undo_failures",
        "forward_hist", "undo_hist",
    ).iterator(chunk_size=2000)  # fmt: skip


def tools_health(
    projects: Sequence[Project], window: str, *, now: datetime | None = None
) -> list[Health]:
    """Every tool that ran in ``projects`` in the window, most runs first."""
    by_tool: dict[str, Health] = {}
    for row in _rows(projects, WINDOWS[window], now or timezone.now()):
        by_tool.setdefault(row.tool_name, Health(tool_name=row.tool_name)).add(row)
    return sorted(by_tool.values(), key=lambda h: (-(h.runs + h.undo_runs), h.tool_name))


def tool_health(
    projects: Sequence[Project], tool: str, window: str, *, now: datetime | None = None
) -> tuple[Health, list[Health]]:
    """One tool over the window: its totals, and one ``Health`` per chart bar (oldest first)."""
    chosen = WINDOWS[window]
    now = now or timezone.now()
    start, _ = _bounds(chosen, now)
    bars = [
        Health(tool_name=tool, start=start + i * chosen.bar)
        for i in range(int(chosen.span / chosen.bar))
    ]
    total = Health(tool_name=tool)
    for row in _rows(projects, chosen, now, tool):
        index = int((row.bucket_start - start) / chosen.bar)
        if 0 <= index < len(bars):
            bars[index].add(row)
            total.add(row)
    return total, bars

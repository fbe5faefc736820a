"""Bar-chart geometry for server-rendered SVG: no chart library, no script, reads without colour."""

from __future__ import annotations

from dataclasses import dataclass

from sagaboard.health.reads.overview import Bucket

# Stacking order, bottom up; every segment also carries its status as text (a <title>).
STACK = ["COMPLETED", "ROLLED_BACK", "ROLLED_BACK_WITH_EXCEPTIONS", "FAILED", "ROLLBACK_FAILED"]
LABELS = {
    "COMPLETED": "completed",
    "ROLLED_BACK": "rolled back cleanly",
    "ROLLED_BACK_WITH_EXCEPTIONS": "rolled back with exceptions",
    "FAILED": "failed",
    "ROLLBACK_FAILED": "rollback failed",
}
"""Each series as the chart's text says it (hover titles and the legend)."""


@dataclass(frozen=True)
class Segment:
    status: str
    count: int
    y: float
    height: float

    @property
    def label(self) -> str:
        return LABELS.get(self.status, self.status)


@dataclass(frozen=True)
class Bar:
    x: float
    label: str
    total: int
    segments: list[Segment]


@dataclass(frozen=True)
class Chart:
    width: float
    height: float
    bar_width: float
    bars: list[Bar]
    total: int


def stacked_bars(buckets: list[Bucket], *, height: float = 80, span: float = 336) -> Chart:
    """One bar per bucket, segments stacked by status, scaled to the tallest bar.

    Every chart is ``span`` units wide whatever its number of buckets, so charts side
    by side share one scale for text.
    """
    step = span / max(len(buckets), 1)
    width = step - 2
    top = max((b.total for b in buckets), default=0) or 1
    bars = []
    for i, bucket in enumerate(buckets):
        y = height
        segments = []
        for status in STACK:
            n = bucket.by_status.get(status, 0)
            if n:
                h = n / top * height
                y -= h
                segments.append(Segment(status, n, y, h))
        label = bucket.start.strftime("%H:%M")
        bars.append(Bar(i * step, label, bucket.total, segments))
    total = sum(b.total for b in buckets)
    return Chart(span, height, width, bars, total)

"""Chart geometry for the per-tool health pages: server-rendered SVG, no script, no style.

Two charts per kind of call (forward, undo): runs per bar stacked as succeeded / failed,
and p50 / p95 durations per bar on a log scale. Every mark carries its numbers as text
(a ``<title>``), so the charts read without colour.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sagaboard.health.reads.tool_health import Health
from sagaboard.ui import times

SPAN = 336.0
HEIGHT = 80.0


@dataclass(frozen=True)
class Segment:
    css: str
    label: str
    count: int
    y: float
    height: float


@dataclass(frozen=True)
class Bar:
    x: float
    label: str
    total: int
    segments: list[Segment]


@dataclass(frozen=True)
class RunsChart:
    width: float
    height: float
    bar_width: float
    bars: list[Bar]
    total: int
    failed: int


def _label(bar: Health, *, daily: bool) -> str:
    if bar.start is None:
        return ""
    return bar.start.strftime("%m-%d %H:%M" if daily else "%H:%M")


def runs_chart(bars: Sequence[Health], *, undo: bool, daily: bool = False) -> RunsChart:
    """Runs per bar, failed on top of succeeded, scaled to the tallest bar."""
    step = SPAN / max(len(bars), 1)
    counts = [(b.undo_runs, b.undo_failures) if undo else (b.runs, b.failures) for b in bars]
    top = max((runs for runs, _ in counts), default=0) or 1
    out = []
    for i, (bar, (runs, failed)) in enumerate(zip(bars, counts, strict=True)):
        y = HEIGHT
        segments = []
        for css, label, n in (("ok", "succeeded", runs - failed), ("failed", "failed", failed)):
            if n > 0:
                h = n / top * HEIGHT
                y -= h
                segments.append(Segment(css, label, n, y, h))
        out.append(Bar(i * step, _label(bar, daily=daily), runs, segments))
    return RunsChart(SPAN, HEIGHT, max(step - 2, 1.0), out,
                     sum(c[0] for c in counts), sum(c[1] for c in counts))  # fmt: skip


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    label: str
    ms: float


@dataclass(frozen=True)
class Line:
    css: str
    name: str
    points: list[Point]
    paths: list[str]
    """SVG ``points`` attribute values, one per run of bars with data (gaps stay gaps)."""


@dataclass(frozen=True)
class DurationChart:
    width: float
    height: float
    lines: list[Line]
    top_label: str
    empty: bool


def duration_text(ms: float | None) -> str:
    """Milliseconds as the pages write every duration (``times.duration_text``); "-" if none."""
    return "-" if ms is None else times.duration_text(ms / 1000)


def duration_chart(bars: Sequence[Health], *, undo: bool, daily: bool = False) -> DurationChart:
    """p50 and p95 per bar, on a log scale from 1 ms up to the next power of ten."""
    step = SPAN / max(len(bars), 1)
    values = [((b.undo_p50, b.undo_p95) if undo else (b.forward_p50, b.forward_p95)) for b in bars]
    seen = [v for pair in values for v in pair if v is not None]
    top = 10 ** max(1, math.ceil(math.log10(max(max(seen, default=1.0), 1.0))))

    def y_of(ms: float) -> float:
        return HEIGHT - math.log10(max(ms, 1.0)) / math.log10(top) * HEIGHT

    lines = []
    for index, (css, name) in enumerate((("p50", "p50"), ("p95", "p95"))):
        points: list[Point] = []
        paths: list[str] = []
        run: list[str] = []
        for i, (bar, pair) in enumerate(zip(bars, values, strict=True)):
            ms = pair[index]
            if ms is None:
                if run:
                    paths.append(" ".join(run))
                run = []
                continue
            point = Point(i * step + step / 2, y_of(ms), _label(bar, daily=daily), ms)
            points.append(point)
            run.append(f"{point.x:.2f},{point.y:.2f}")
        if run:
            paths.append(" ".join(run))
        lines.append(Line(css, name, points, paths))
    return DurationChart(SPAN, HEIGHT, lines, duration_text(float(top)), not seen)

"""The saga page's timeline: every step's run and undo on one time scale, drawn as one SVG.

Geometry is decided here, in plain functions over plain values (``StepTimes``), so it is
tested without a database and the template only lays out numbers: one row per step
(in step order), each with two lanes, the forward run above and the compensation below
(its undo attempts, and the waits for people: an approval pending or decided, an undo
failed and waiting for an operator). Bars are ``<a>`` elements (their accessible name
says the step, the duration and the state) to the step's card; x and width are SVG
attributes (the CSP allows no style attribute). A bar is never narrower than
``MIN_BAR``, so a 2 ms step among 10-minute ones stays visible and clickable.

A saga that is still moving (a step running, an undo running, a wait not over, or the
saga in progress) is ``live``: the scale reaches past now (``HEADROOM``) and
``static/sagaboard/timeline.js`` moves the now-line and stretches the open bars each
second, until the next live update re-renders the timeline.

Times are the ones recorded (the agent's for a saga it runs; approvals by the server's
clock): the chart shows what was reported, as the step cards do.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from itertools import pairwise

from sagaboard.infra import permalinks, text_policy
from sagaboard.models import OPERATOR_STATES, Approval, Saga, Step
from sagaboard.ui.times import duration_text
from undo_core import AttemptOutcome, SagaStatus, StepState

LABEL_WIDTH = 200.0
"""The step names' column, left of the chart."""
CHART_WIDTH = 740.0
RIGHT_PAD = 20.0
WIDTH = LABEL_WIDTH + CHART_WIDTH + RIGHT_PAD
ROW_HEIGHT = 24.0
LANE_HEIGHT = 9.0
RUN_Y, UNDO_Y = 2.0, 13.0
"""Each lane's offset inside its row: the forward run above, the compensation below."""
AXIS_HEIGHT = 22.0
MIN_BAR = 3.0
LABEL_CHARS = 28
MAX_TICKS = 8
TICK_LABEL_ROOM = 70.0
"""A tick this close to the right edge has its label before it, so the label is not cut off."""
HEADROOM = 0.1
"""How far past now a live saga's scale reaches (a share of its span, at least
``MIN_HEADROOM``): room for the now-line to move before the next update re-renders it."""
MIN_HEADROOM = timedelta(seconds=10)
LAST = datetime.max.replace(tzinfo=UTC)
"""The last instant a time can be (9999-12-31T23:59:59.999999Z): a scale ends there at most."""

_STEP_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500]
_STEP_MS += [s * 1000 for s in (1, 2, 5, 10, 15, 30)]
_STEP_MS += [m * 60_000 for m in (1, 2, 5, 10, 15, 30)]
_STEP_MS += [h * 3_600_000 for h in (1, 2, 3, 6, 12)]
_STEP_MS += [d * 86_400_000 for d in (1, 2, 7, 14, 30, 90, 365)]
TICK_STEPS_MS = tuple(_STEP_MS)
"""Tick spacings a person reads at once: 1-2-5 ms, then whole seconds, minutes, hours, days."""

LIVE_STATUSES = frozenset({SagaStatus.IN_PROGRESS, SagaStatus.COMPENSATING})

FAILED_OUTCOMES = frozenset(
    {AttemptOutcome.FAILED, AttemptOutcome.TIMED_OUT, AttemptOutcome.INTERRUPTED}
)


# ------------------------------------------------------------------ text


def _shown(text: str) -> str:
    return text_policy.visible_text(text)


def short(text: str, limit: int = LABEL_CHARS) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (a row label in the chart)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class Span:
    """A stretch of time; ``end`` None: not over yet (it ends now)."""

    start: datetime
    end: datetime | None

    def until(self, now: datetime) -> datetime:
        return self.end if self.end is not None else max(now, self.start)

    def seconds(self, now: datetime) -> float:
        return max((self.until(now) - self.start).total_seconds(), 0.0)


@dataclass(frozen=True)
class AttemptTimes:
    number: int
    span: Span
    outcome: str | None
    actor: str | None = None


@dataclass(frozen=True)
class Wait:
    """A stretch a step's undo waited for a person: ``who`` is "approval" or "operator"."""

    who: str
    span: Span


@dataclass(frozen=True)
class StepTimes:
    """What the timeline reads of one step (``step_times`` reads it off the models)."""

    step_id: str
    tool_name: str
    state: str
    run: Span | None
    """Its forward run; None when no time was reported for it."""
    attempts: Sequence[AttemptTimes] = ()
    waits: Sequence[Wait] = ()


def forward_span(step: Step) -> Span | None:
    """created_at -> completed_at (else updated_at for a step that ended there); open while
    it is PENDING. A step that moved on with no completion time recorded shows its start."""
    if step.created_at is None:
        return None
    if step.completed_at is not None:
        return Span(step.created_at, step.completed_at)
    if step.state == StepState.PENDING:
        return Span(step.created_at, None)
    if step.state in (StepState.FAILED, StepState.COMPLETED, StepState.IN_DOUBT):
        return Span(step.created_at, step.updated_at or step.created_at)
    return Span(step.created_at, step.created_at)


def attempt_times(step: Step) -> list[AttemptTimes]:
    """Its undo attempts (prefetched), each open while it has neither end nor outcome."""
    out = []
    for a in step.attempts.all():
        end = a.finished_at if a.finished_at is not None else (a.started_at if a.outcome else None)
        out.append(AttemptTimes(a.number, Span(a.started_at, end), a.outcome, a.actor))
    return out


def approval_waits(approvals: Iterable[Approval]) -> list[Wait]:
    """Each approval asked for the step: from the ask to the decision (or now, pending)."""
    waits = []
    for a in approvals:
        end = None if a.is_pending else (a.decided_at or a.created_at)
        waits.append(Wait("approval", Span(a.created_at, end)))
    return waits


def operator_waits(step: Step, attempts: Sequence[AttemptTimes]) -> list[Wait]:
    """Where a failed undo waited for a person: between a failed attempt and a retry a person
    asked for; after the last failed attempt until an operator settled it (resolved, left)
    or, while it needs one, until now."""
    waits = []
    for before, after in pairwise(attempts):
        if before.outcome in FAILED_OUTCOMES and after.actor and before.span.end is not None:
            waits.append(Wait("operator", Span(before.span.end, after.span.start)))
    last = attempts[-1] if attempts else None
    began = last.span.end if last is not None else (step.updated_at or step.created_at)
    if last is not None and last.outcome not in FAILED_OUTCOMES:
        return waits
    if began is None:
        return waits
    if step.state in OPERATOR_STATES:
        waits.append(Wait("operator", Span(began, step.left_at)))
    elif step.state == StepState.RESOLVED and last is not None:
        waits.append(Wait("operator", Span(began, max(step.updated_at or began, began))))
    return waits


def step_times(step: Step, approvals: Iterable[Approval]) -> StepTimes:
    attempts = attempt_times(step)
    waits = [*approval_waits(approvals), *operator_waits(step, attempts)]
    return StepTimes(step.step_id, step.tool_name, step.state, forward_span(step), attempts, waits)


# ------------------------------------------------------------------ geometry


@dataclass(frozen=True)
class Scale:
    """Time to x: ``start`` at ``x0``, ``end`` at ``x0 + width``."""

    start: datetime
    end: datetime
    x0: float = LABEL_WIDTH
    width: float = CHART_WIDTH

    @cached_property
    def ms(self) -> float:
        return max((self.end - self.start).total_seconds() * 1000, 1.0)

    @cached_property
    def px_per_ms(self) -> float:
        return self.width / self.ms

    @property
    def right(self) -> float:
        return self.x0 + self.width

    def x(self, at: datetime) -> float:
        offset = (at - self.start).total_seconds() * 1000
        return self.x0 + min(max(offset * self.px_per_ms, 0.0), self.width)


def _later(at: datetime, by: timedelta) -> datetime:
    """``at + by``, or ``LAST`` when that is past year 9999."""
    try:
        return at + by
    except OverflowError:
        return LAST


def scale_for(
    times: Iterable[datetime], *, now: datetime, live: bool, x0: float = LABEL_WIDTH
) -> Scale:
    """The scale from the first time to the last (to past now when live, ``HEADROOM``); one
    of no length lasts a second. It never reaches past ``LAST``: an agent's clock may say
    9999-12-31T23:59:59Z, and the scale still starts at the first time reported."""
    seen = list(times)
    start = min(seen, default=now)
    end = max(seen, default=start)
    if live:
        end = max(end, now)
        end = _later(end, max((end - start) * HEADROOM, MIN_HEADROOM))
    if end <= start:
        end = _later(start, timedelta(seconds=1))  # at LAST: none left (Scale.ms is 1 ms)
    return Scale(start, end, x0)


def bar_box(span: Span, scale: Scale, now: datetime) -> tuple[float, float]:
    """A bar's x and width: at least ``MIN_BAR`` wide, and kept inside the chart."""
    x = scale.x(span.start)
    width = max(scale.x(span.until(now)) - x, MIN_BAR)
    if x + width > scale.right:
        x = max(scale.right - width, scale.x0)
    return round(x, 2), round(width, 2)


@dataclass(frozen=True)
class Tick:
    x: float
    label: str
    anchor: str = "start"
    """Where its label sits: after the line, or before it near the chart's right edge."""


def ticks(scale: Scale, max_ticks: int = MAX_TICKS) -> list[Tick]:
    """Gridlines from the start, at the first 1-2-5 spacing that gives at most ``max_ticks``;
    labelled as the time since the start ("+2 s")."""
    step = next((s for s in TICK_STEPS_MS if scale.ms / s <= max_ticks), None)
    if step is None:  # longer than the largest spacing allows: whole multiples of it
        step = TICK_STEPS_MS[-1] * math.ceil(scale.ms / TICK_STEPS_MS[-1] / max_ticks)
    out = []
    n = 0
    while n * step <= scale.ms:
        label = "0" if n == 0 else "+" + duration_text(n * step / 1000)
        x = round(scale.x0 + n * step * scale.px_per_ms, 2)
        anchor = "end" if x > scale.right - TICK_LABEL_ROOM else "start"
        if anchor == "end" and step * scale.px_per_ms < 2 * TICK_LABEL_ROOM:
            label = ""  # its label would run into the one before: the line alone
        out.append(Tick(x, label, anchor))
        n += 1
    return out


@dataclass(frozen=True)
class Bar:
    """One drawn stretch: ``kind`` "run", "undo" or "wait"; ``css`` its classes."""

    x: float
    y: float
    width: float
    height: float
    css: str
    label: str
    open: bool


@dataclass(frozen=True)
class Row:
    y: float
    text_y: float
    label: str
    href: str
    bars: list[Bar]


@dataclass(frozen=True)
class Timeline:
    width: float
    height: float
    axis_height: float
    chart_x: float
    chart_right: float
    rows: list[Row]
    ticks: list[Tick]
    live: bool
    now_x: float | None
    px_per_ms: float
    start: datetime
    span_text: str
    bar_count: int = field(default=0)


def _run_css(state: str, open_: bool) -> str:
    if open_:
        return "running"
    if state == StepState.FAILED:
        return "failed"
    if state == StepState.IN_DOUBT:
        return "rollback-failed"
    return "completed"


def _undo_css(outcome: str | None) -> str:
    if outcome is None:
        return "compensating"
    return "rolled-back" if outcome == AttemptOutcome.SUCCEEDED else "rollback-failed"


def _run_label(s: StepTimes, now: datetime) -> str:
    name = f"{_shown(s.step_id)} {_shown(s.tool_name)}"
    if s.run is None:
        return f"{name}: no time reported, {s.state}"
    took = duration_text(s.run.seconds(now))
    return f"{name}: {'running for ' if s.run.end is None else ''}{took}, {s.state}"


def _undo_label(s: StepTimes, a: AttemptTimes, now: datetime) -> str:
    took = duration_text(a.span.seconds(now))
    outcome = a.outcome or "running"
    return f"{_shown(s.step_id)} {_shown(s.tool_name)}: undo attempt {a.number}, {took}, {outcome}"


def _wait_label(s: StepTimes, w: Wait, now: datetime) -> str:
    whom = "approval" if w.who == "approval" else "an operator"
    took = duration_text(w.span.seconds(now))
    verb = f"waiting for {whom} for {took}" if w.span.end is None else f"waited {took} for {whom}"
    return f"{_shown(s.step_id)} {_shown(s.tool_name)}: {verb}"


def _row(s: StepTimes, index: int, scale: Scale, now: datetime) -> Row:
    y = index * ROW_HEIGHT
    bars = []
    if s.run is not None:
        x, w = bar_box(s.run, scale, now)
        open_ = s.run.end is None
        css = f"bar run state-{_run_css(s.state, open_)}"
        bars.append(Bar(x, y + RUN_Y, w, LANE_HEIGHT, css, _run_label(s, now), open_))
    for wait in s.waits:
        x, w = bar_box(wait.span, scale, now)
        css = f"bar wait wait-{wait.who}"
        open_ = wait.span.end is None
        bars.append(Bar(x, y + UNDO_Y, w, LANE_HEIGHT, css, _wait_label(s, wait, now), open_))
    for a in s.attempts:
        x, w = bar_box(a.span, scale, now)
        css = f"bar undo state-{_undo_css(a.outcome)}"
        open_ = a.span.end is None
        bars.append(Bar(x, y + UNDO_Y, w, LANE_HEIGHT, css, _undo_label(s, a, now), open_))
    label = short(f"{_shown(s.step_id)} {_shown(s.tool_name)}")  # not "id · tool": the cards' text
    return Row(y, y + 16, label, "#" + permalinks.step_anchor(s.step_id), bars)


def _all_times(steps: Sequence[StepTimes], now: datetime) -> list[datetime]:
    out: list[datetime] = []
    for s in steps:
        spans = [s.run] if s.run else []
        spans += [a.span for a in s.attempts] + [w.span for w in s.waits]
        for span in spans:
            out += [span.start, span.until(now)]
    return out


def is_live(status: str, steps: Sequence[StepTimes]) -> bool:
    """Something still moves: the saga runs or rolls back, or a run, undo or wait is open."""
    if status in LIVE_STATUSES:
        return True
    for s in steps:
        spans = ([s.run] if s.run else []) + [a.span for a in s.attempts]
        if any(span.end is None for span in [*spans, *(w.span for w in s.waits)]):
            return True
    return False


def build(
    steps: Sequence[StepTimes], *, status: str, now: datetime, began: datetime | None = None
) -> Timeline:
    """The whole timeline: a row per step, the ticks, the now-line when live."""
    live = is_live(status, steps)
    times = _all_times(steps, now) + ([began] if began is not None else [])
    scale = scale_for(times, now=now, live=live)
    rows = [_row(s, i, scale, now) for i, s in enumerate(steps)]
    height = max(len(rows), 1) * ROW_HEIGHT
    return Timeline(
        width=WIDTH,
        height=height,
        axis_height=AXIS_HEIGHT,
        chart_x=scale.x0,
        chart_right=scale.right,
        rows=rows,
        ticks=ticks(scale),
        live=live,
        now_x=round(scale.x(now), 2) if live else None,
        px_per_ms=scale.px_per_ms,
        start=scale.start,
        span_text=duration_text(_span_seconds(times)),
        bar_count=sum(len(r.bars) for r in rows),
    )


def _span_seconds(times: Sequence[datetime]) -> float:
    return (max(times) - min(times)).total_seconds() if times else 0.0


# ------------------------------------------------------------------ the step cards


@dataclass(frozen=True)
class StepDurations:
    """What a step card says of its times: "ran 1.2 s", "undo 300 ms, 2 attempts"."""

    ran: str
    undo: str
    waited: str


def durations(s: StepTimes, now: datetime) -> StepDurations:
    ran = ""
    if s.run is not None:
        took = duration_text(s.run.seconds(now))
        ran = f"running for {took}" if s.run.end is None else f"ran {took}"
    undo = ""
    if s.attempts:
        took = duration_text(sum(a.span.seconds(now) for a in s.attempts))
        n = len(s.attempts)
        running = any(a.span.end is None for a in s.attempts)
        undo = f"undo {took}, {n} attempt{'s' if n != 1 else ''}" + (", running" if running else "")
    waited = "; ".join(_waited(w, now) for w in s.waits)
    return StepDurations(ran, undo, waited)


def _waited(w: Wait, now: datetime) -> str:
    whom = "approval" if w.who == "approval" else "an operator"
    took = duration_text(w.span.seconds(now))
    return f"waiting for {whom} for {took}" if w.span.end is None else f"waited {took} for {whom}"


def for_saga(
    saga: Saga, timeline: Sequence[tuple[Step, list[Approval]]], now: datetime
) -> Timeline:
    """The saga page's timeline; each step also gets its card's ``durations``."""
    steps = []
    for step, approvals in timeline:
        times = step_times(step, approvals)
        step.durations = durations(times, now)  # type: ignore[attr-defined]
        steps.append(times)
    return build(steps, status=saga.status, now=now, began=saga.created_at)

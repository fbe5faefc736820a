"""The saga timeline's geometry: scale, lanes, waits, the now-line, bar widths, ticks, text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sagaboard.infra import permalinks
from sagaboard.sagas.pages import timeline as tl
from sagaboard.sagas.pages.timeline import AttemptTimes, Span, StepTimes, Wait

T0 = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def step(
    n: int, start: float, end: float | None, state: str = "COMPLETED", **kw: object
) -> StepTimes:
    return StepTimes(
        f"step-{n}", "refund", state, Span(at(start), None if end is None else at(end)), **kw
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 ms"),
        (0.0002, "<1 ms"),
        (0.3, "300 ms"),
        (1.23, "1.2 s"),
        (12.4, "12 s"),
        (60, "1 min"),
        (125, "2 min 5 s"),
        (3600 * 3 + 600, "3 h 10 min"),
        (86400 * 2 + 3600, "2 d 1 h"),
    ],
)
def test_durations_read_as_people_say_them(seconds: float, text: str) -> None:
    assert tl.duration_text(seconds) == text


def test_the_scale_maps_the_first_time_to_the_chart_start_and_the_last_to_its_end() -> None:
    scale = tl.scale_for([at(0), at(10), at(5)], now=at(100), live=False)
    assert scale.x(at(0)) == tl.LABEL_WIDTH
    assert scale.x(at(10)) == pytest.approx(tl.LABEL_WIDTH + tl.CHART_WIDTH)
    assert scale.x(at(5)) == pytest.approx(tl.LABEL_WIDTH + tl.CHART_WIDTH / 2)
    assert scale.x(at(-50)) == tl.LABEL_WIDTH and scale.x(at(50)) == scale.right  # clamped


def test_a_live_scale_reaches_past_now_so_the_now_line_can_move() -> None:
    scale = tl.scale_for([at(0), at(100)], now=at(200), live=True)
    assert scale.end == at(220)  # now, plus a tenth of the span
    short = tl.scale_for([at(0)], now=at(1), live=True)
    assert short.end == at(11)  # at least MIN_HEADROOM
    assert tl.scale_for([at(3)], now=at(3), live=False).end == at(4)  # never zero wide


def test_a_scale_at_the_last_instant_an_agent_may_report_stops_there() -> None:
    # Issue 36: a saga dated 9999-12-31T23:59:59Z (the API takes it) made the saga page and
    # its live feed fail: its live headroom, or the second a scale lasts, went past year 9999.
    first, last = datetime(1, 1, 1, tzinfo=UTC), tl.LAST
    assert last == datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    for times, live in [([last - timedelta(seconds=1)], True), ([first, last], True),
                        ([last], False), ([last], True)]:  # fmt: skip
        scale = tl.scale_for(times, now=T0, live=live)
        assert scale.start == min(times) and scale.end == last  # from the first time to LAST
        x, width = tl.bar_box(Span(max(times), None), scale, T0)
        assert scale.x0 <= x and x + width <= scale.right and tl.ticks(scale)[0].label == "0"
    whole = tl.scale_for([first, last], now=T0, live=True)
    share = (T0 - first) / (last - first)  # 2025 of 9999 years
    assert whole.x(T0) == pytest.approx(tl.LABEL_WIDTH + tl.CHART_WIDTH * share)
    chart = tl.build([step(1, 0, 1, "PENDING")], status="IN_PROGRESS", now=T0, began=last)
    assert chart.live and chart.now_x == tl.LABEL_WIDTH  # now is the first time shown
    assert chart.start == T0 and chart.ticks[0].label == "0"
    spans = [Span(last, None), Span(first, last)]
    open_at_last = StepTimes("s", "t", "PENDING", spans[0], waits=[Wait("approval", spans[1])])
    chart = tl.build([open_at_last], status="COMPENSATING", now=T0, began=first)
    run, wait = chart.rows[0].bars
    assert run.open and run.label == "s t: running for 0 ms, PENDING"
    assert run.x + run.width <= chart.chart_right and wait.width == pytest.approx(tl.CHART_WIDTH)
    assert wait.label == "s t: waited 3652059 d for approval"  # years 1 to 9999, in days
    assert tl.durations(open_at_last, T0).ran == "running for 0 ms"


def test_a_short_bar_is_never_narrower_than_the_minimum_and_stays_inside_the_chart() -> None:
    scale = tl.scale_for([at(0), at(1000)], now=at(1000), live=False)
    x, width = tl.bar_box(Span(at(10), at(10.001)), scale, at(1000))
    assert width == tl.MIN_BAR and x == pytest.approx(scale.x(at(10)), abs=0.01)
    x, width = tl.bar_box(Span(at(1000), at(1000)), scale, at(1000))
    assert width == tl.MIN_BAR and x + width == pytest.approx(scale.right)
    x, width = tl.bar_box(Span(at(0), at(500)), scale, at(1000))
    assert (x, width) == (tl.LABEL_WIDTH, pytest.approx(tl.CHART_WIDTH / 2, abs=0.01))


def test_ticks_fall_on_round_spacings_labelled_from_the_start() -> None:
    scale = tl.scale_for([at(0), at(10)], now=at(10), live=False)
    ticks = tl.ticks(scale)
    assert [t.label for t in ticks] == ["0", "+2.0 s", "+4.0 s", "+6.0 s", "+8.0 s", "+10 s"]
    assert ticks[0].x == tl.LABEL_WIDTH and ticks[-1].x == pytest.approx(scale.right)
    assert ticks[0].anchor == "start" and ticks[-1].anchor == "end"  # its label stays inside
    crowded = tl.ticks(tl.scale_for([at(0), at(12)], now=at(12), live=False), max_ticks=12)
    assert crowded[-1].anchor == "end" and crowded[-1].label == ""  # no label over another
    hours = tl.ticks(tl.scale_for([at(0), at(7 * 3600)], now=at(0), live=False))
    assert [t.label for t in hours][:3] == ["0", "+1 h", "+2 h"]
    assert len(tl.ticks(tl.scale_for([at(0), at(3e9)], now=at(0), live=False))) <= tl.MAX_TICKS + 1


def test_each_step_is_a_row_with_its_run_above_and_its_undo_and_waits_below() -> None:
    undo = AttemptTimes(1, Span(at(8), at(9)), "succeeded")
    wait = Wait("approval", Span(at(5), at(8)))
    steps = [step(1, 0, 2), step(2, 2, 4, "ROLLED_BACK", attempts=[undo], waits=[wait])]
    chart = tl.build(steps, status="ROLLED_BACK", now=at(100))
    first, second = chart.rows
    assert (first.y, second.y) == (0, tl.ROW_HEIGHT)
    assert [b.css for b in second.bars] == [
        "bar run state-completed",
        "bar wait wait-approval",
        "bar undo state-rolled-back",
    ]
    run, waited, undone = second.bars
    assert run.y == tl.ROW_HEIGHT + tl.RUN_Y and waited.y == undone.y == tl.ROW_HEIGHT + tl.UNDO_Y
    assert waited.x < undone.x and run.x < waited.x
    assert second.href == "#step-step-2" and chart.bar_count == 4
    assert run.label == "step-2 refund: 2.0 s, ROLLED_BACK"
    assert undone.label == "step-2 refund: undo attempt 1, 1.0 s, succeeded"
    assert waited.label == "step-2 refund: waited 3.0 s for approval"
    assert not chart.live and chart.now_x is None  # nothing moves in a rolled-back saga


def test_a_live_saga_has_a_now_line_and_its_open_bars_end_at_now() -> None:
    pending = Wait("approval", Span(at(4), None))
    steps = [step(1, 0, 2, "AWAITING_APPROVAL", waits=[pending]), step(2, 2, None, "PENDING")]
    chart = tl.build(steps, status="FAILED", now=at(10))
    assert chart.live and chart.now_x is not None
    run_open = chart.rows[1].bars[0]
    assert run_open.open and run_open.css == "bar run state-running"
    assert run_open.x + run_open.width == pytest.approx(chart.now_x, abs=0.02)
    wait = chart.rows[0].bars[1]
    assert wait.open and wait.label == "step-1 refund: waiting for approval for 6.0 s"
    # 10 s so far, plus MIN_HEADROOM (10 s) for the now-line to move into:
    assert chart.px_per_ms == pytest.approx(tl.CHART_WIDTH / 20_000)
    assert chart.now_x == pytest.approx(tl.LABEL_WIDTH + tl.CHART_WIDTH / 2)


def test_a_saga_in_progress_is_live_even_between_steps() -> None:
    assert tl.is_live("IN_PROGRESS", [step(1, 0, 1)])
    assert not tl.is_live("COMPLETED", [step(1, 0, 1)])
    assert tl.is_live(
        "ROLLBACK_FAILED", [step(1, 0, 1, waits=[Wait("operator", Span(at(2), None))])]
    )


def test_a_failed_undo_waits_for_an_operator_until_someone_settles_it() -> None:
    failed = [AttemptTimes(1, Span(at(1), at(2)), "failed")]
    waits = tl.operator_waits(_FakeStep("ROLLBACK_FAILED"), failed)  # type: ignore[arg-type]
    assert waits == [Wait("operator", Span(at(2), None))]
    left = _FakeStep("ROLLBACK_FAILED", left_at=at(30))
    assert tl.operator_waits(left, failed) == [Wait("operator", Span(at(2), at(30)))]  # type: ignore[arg-type]
    resolved = _FakeStep("RESOLVED", updated_at=at(50))
    assert tl.operator_waits(resolved, failed) == [Wait("operator", Span(at(2), at(50)))]  # type: ignore[arg-type]
    retried = [*failed, AttemptTimes(2, Span(at(9), at(10)), "succeeded", actor="ann")]
    done = _FakeStep("ROLLED_BACK")
    assert tl.operator_waits(done, retried) == [Wait("operator", Span(at(2), at(9)))]  # type: ignore[arg-type]
    unattended = [*failed, AttemptTimes(2, Span(at(3), at(4)), "succeeded")]
    assert tl.operator_waits(done, unattended) == []  # type: ignore[arg-type]  # a worker's retry


class _FakeStep:
    def __init__(
        self, state: str, *, left_at: datetime | None = None, updated_at: datetime | None = None
    ):
        self.state, self.left_at = state, left_at
        self.updated_at, self.created_at = updated_at, at(0)


def test_a_step_card_says_how_long_it_ran_and_undid() -> None:
    attempts = [
        AttemptTimes(1, Span(at(10), at(10.1)), "failed"),
        AttemptTimes(2, Span(at(11), at(11.2)), "succeeded"),
    ]
    said = tl.durations(step(3, 0, 1.2, "ROLLED_BACK", attempts=attempts), at(20))
    assert (said.ran, said.undo) == ("ran 1.2 s", "undo 300 ms, 2 attempts")
    running = tl.durations(step(4, 0, None, "PENDING"), at(4))
    assert (running.ran, running.undo, running.waited) == ("running for 4.0 s", "", "")


def test_row_labels_show_invisible_characters_and_are_cut_short() -> None:
    odd = StepTimes("pa\u200by", "t" * 40, "COMPLETED", Span(at(0), at(1)))
    row = tl.build([odd], status="COMPLETED", now=at(1)).rows[0]
    assert "\u200b" not in row.label and row.label.startswith("pa⟨U+200B⟩y ttt")
    assert len(row.label) == tl.LABEL_CHARS and row.label.endswith("…")
    assert "⟨U+200B⟩" in row.bars[0].label


def test_a_step_without_reported_times_still_gets_its_row_but_no_bar() -> None:
    chart = tl.build([StepTimes("step-1", "x", "PENDING", None)], status="COMPLETED", now=at(0))
    assert len(chart.rows) == 1 and chart.rows[0].bars == []


@pytest.mark.parametrize(
    ("step_id", "anchor"),
    [
        ("step-3", "step-step-3"),
        ("a b", "step-a%20b"),
        ('"><script>', "step-%22%3E%3Cscript%3E"),
        ("a%20b", "step-a%2520b"),  # % itself encoded: never the same anchor as "a b"
        ("schritt-ü/1#x", "step-schritt-%C3%BC%2F1%23x"),
    ],
)
def test_a_step_anchor_is_its_id_made_safe_for_an_id_attribute_and_a_fragment(
    step_id: str, anchor: str
) -> None:
    assert permalinks.step_anchor(step_id) == anchor

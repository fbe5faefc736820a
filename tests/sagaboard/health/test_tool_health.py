"""Per-tool health read from the rollups: counts, rates, and percentiles from summed
histograms against the exact ones, to the resolution of a histogram bin."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
from django.utils import timezone

from sagaboard.health.reads import tool_health
from sagaboard.health.services import tool_rollup
from sagaboard.models import Project
from sagaboard.models.tool_health import BINS, bin_bounds, bin_value, duration_bin
from tests.support.saga_rows import StepSpec, make_saga


def exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def test_bins_cover_every_duration_once() -> None:
    for index in range(BINS):
        low, high = bin_bounds(index)
        assert low <= bin_value(index) < high or (index == BINS - 1 and bin_value(index) == low)
        if index:
            assert bin_bounds(index - 1)[1] == pytest.approx(low)
    for ms in (0.0, 0.3, 1.0, 1.5, 7.0, 999.0, 1e4, 3.6e6, 1e12):
        low, high = bin_bounds(duration_bin(ms))
        assert low <= ms < high


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_from_a_histogram_fall_in_the_exact_ones_bin(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.lognormvariate(4, 1.5) for _ in range(rng.randint(1, 400))]
    hist: dict[str, int] = {}
    for v in values:
        hist[str(duration_bin(v))] = hist.get(str(duration_bin(v)), 0) + 1
    for q in (0.5, 0.95):
        got = tool_health.percentile(hist, q)
        assert got is not None and duration_bin(got) == duration_bin(exact(values, q))
        assert exact(values, q) / math.sqrt(2) <= got <= exact(values, q) * math.sqrt(2)
    assert tool_health.percentile({}, 0.5) is None


@pytest.mark.django_db
def test_tools_health_sums_buckets_into_rates_and_percentiles() -> None:
    shop = Project.objects.create(slug="shop", name="Shop")
    forward = [15.0, 40.0, 90.0, 220.0, 500.0, 1200.0, 3000.0]
    now = timezone.now()
    for n, ms in enumerate(forward):  # spread over several hours of the day
        failed = n % 3 == 0
        make_saga(shop, f"s{n}", [StepSpec("charge", "FAILED" if failed else "COMPLETED", ms=ms,
                                            undo_ms=[] if failed else [(ms / 10, "succeeded")])],
                  at=now - timedelta(hours=n, minutes=3))  # fmt: skip
    tool_rollup.rollup_fold()
    day = tool_health.tools_health([shop], "day")
    assert [h.tool_name for h in day] == ["charge"]
    h = day[0]
    assert (h.runs, h.failures, h.undo_runs, h.undo_failures) == (7, 3, 4, 0)
    assert h.failure_rate == pytest.approx(3 / 7) and h.undo_failure_rate == 0
    assert duration_bin(h.forward_p50 or 0) == duration_bin(exact(forward, 0.5))
    assert duration_bin(h.forward_p95 or 0) == duration_bin(exact(forward, 0.95))
    undos = [ms / 10 for n, ms in enumerate(forward) if n % 3]
    assert duration_bin(h.undo_p50 or 0) == duration_bin(exact(undos, 0.5))
    hour = tool_health.tools_health([shop], "hour")
    assert hour[0].runs == 1  # only the newest saga started within the hour
    total, bars = tool_health.tool_health([shop], "charge", "day")
    assert total.runs == 7 and len(bars) == 24 and sum(b.runs for b in bars) == 7
    _, week = tool_health.tool_health([shop], "charge", "week")
    assert len(week) == 28 and sum(b.runs for b in week) == 7
    assert tool_health.tools_health([], "day") == []

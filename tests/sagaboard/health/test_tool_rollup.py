"""The per-tool rollups: what a fold counts, that folding again never double-counts, and
that it follows changed steps, retention and the prune."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from sagaboard.health.services import tool_rollup
from sagaboard.health.services.retention import retention_run
from sagaboard.models import CompensationAttempt, Project, Saga, Step, ToolRollup, ToolRollupMark
from sagaboard.models.tool_health import FIVE_MINUTES, HOUR, duration_bin
from tests.support.saga_rows import StepSpec, make_saga

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def totals(tool: str, granularity: int = HOUR) -> tuple[int, int, int, int]:
    rows = ToolRollup.objects.filter(tool_name=tool, granularity=granularity)
    return (
        sum(r.runs for r in rows),
        sum(r.failures for r in rows),
        sum(r.undo_runs for r in rows),
        sum(r.undo_failures for r in rows),
    )


def hist(tool: str, field: str = "forward_hist", granularity: int = FIVE_MINUTES) -> dict:
    found: dict[str, int] = {}
    for r in ToolRollup.objects.filter(tool_name=tool, granularity=granularity):
        for b, n in getattr(r, field).items():
            found[b] = found.get(b, 0) + n
    return found


def test_a_fold_counts_runs_failures_undos_and_durations(shop: Project) -> None:
    make_saga(
        shop,
        "a",
        [
            StepSpec("charge", ms=120, undo_ms=[(40, "failed"), (50, "succeeded")]),
            StepSpec("charge", ms=300),
            StepSpec("label", "FAILED", ms=900),
        ],
    )
    make_saga(shop, "b", [StepSpec("charge", "PENDING", ms=None)])  # still running: not a run
    report = tool_rollup.rollup_fold()
    assert report.sagas_folded == 2 and report.steps == 4 and report.attempts == 2
    for g in (FIVE_MINUTES, HOUR):
        assert totals("charge", g) == (2, 0, 2, 1)
        assert totals("label", g) == (1, 1, 0, 0)
    assert hist("charge") == {str(duration_bin(120)): 1, str(duration_bin(300)): 1}
    assert hist("charge", "undo_hist") == {str(duration_bin(40)): 1, str(duration_bin(50)): 1}
    assert hist("label") == {str(duration_bin(900)): 1}


def test_folding_again_counts_nothing_twice(shop: Project) -> None:
    make_saga(shop, "a", [StepSpec("charge"), StepSpec("charge")])
    tool_rollup.rollup_fold()
    again = tool_rollup.rollup_fold()
    rebuilt = tool_rollup.rollup_fold(rebuild=True)
    assert again.sagas_folded == 0 and rebuilt.sagas_folded == 0  # unchanged since their marks
    assert totals("charge") == (2, 0, 0, 0)
    ToolRollupMark.objects.all().delete()  # forgotten marks: folded again from scratch...
    ToolRollup.objects.all().delete()
    tool_rollup.rollup_fold(rebuild=True)
    assert totals("charge") == (2, 0, 0, 0)  # ...to the same counts


def test_new_and_changed_steps_are_folded_as_they_now_are(shop: Project) -> None:
    saga = make_saga(shop, "a", [StepSpec("charge", "PENDING", ms=None)])
    tool_rollup.rollup_fold()
    assert totals("charge") == (0, 0, 0, 0)
    # The step completes, then is undone once (its saga's changed_at moves each time).
    step = Step.objects.get(saga=saga)
    step.state, step.completed_at = "COMPLETED", step.created_at + timedelta(milliseconds=70)
    step.changed_at = timezone.now()
    step.save()
    Saga.objects.filter(pk=saga.pk).update(changed_at=step.changed_at)
    tool_rollup.rollup_fold()
    assert totals("charge") == (1, 0, 0, 0)
    assert hist("charge") == {str(duration_bin(70)): 1}
    step.state = "ROLLED_BACK"
    step.save()
    began = step.completed_at
    CompensationAttempt.objects.create(step=step, number=1, started_at=began,
        finished_at=began + timedelta(milliseconds=30), outcome="succeeded")  # fmt: skip
    Saga.objects.filter(pk=saga.pk).update(changed_at=timezone.now())
    tool_rollup.rollup_fold()
    assert totals("charge") == (1, 0, 1, 0)  # the forward run still once
    assert hist("charge") == {str(duration_bin(70)): 1}
    # A second saga arrives: added, the first left as it is.
    make_saga(shop, "b", [StepSpec("charge", "FAILED", ms=10)])
    report = tool_rollup.rollup_fold()
    assert report.sagas_folded == 1
    assert totals("charge") == (2, 1, 1, 0)


def test_a_change_committed_late_is_still_folded_within_the_overlap(shop: Project) -> None:
    tool_rollup.rollup_fold()  # the watermark is now
    # A writer stamped this saga a minute ago but committed only now, after that fold.
    make_saga(shop, "late", [StepSpec("charge")], changed_at=timezone.now() - timedelta(minutes=1))
    tool_rollup.rollup_fold()
    assert totals("charge") == (1, 0, 0, 0)


def test_an_agent_clock_ahead_does_not_park_runs_in_the_future(shop: Project) -> None:
    future = timezone.now() + timedelta(days=300)
    make_saga(shop, "ahead", [StepSpec("charge")], at=future)
    tool_rollup.rollup_fold()
    row = ToolRollup.objects.get(tool_name="charge", granularity=FIVE_MINUTES)
    assert row.bucket_start <= timezone.now()


def test_retention_deletes_the_marks_and_keeps_the_counts(shop: Project) -> None:
    old = timezone.now() - timedelta(hours=2)
    make_saga(shop, "old", [StepSpec("charge")], at=old - timedelta(minutes=1), changed_at=old)
    tool_rollup.rollup_fold()
    assert totals("charge") == (1, 0, 0, 0) and ToolRollupMark.objects.count() == 1
    report = retention_run(older_than=timedelta(hours=1))
    assert report.sagas == 1
    assert ToolRollupMark.objects.count() == 0  # nothing points at the deleted saga
    tool_rollup.rollup_fold(rebuild=True)
    assert totals("charge") == (1, 0, 0, 0)  # history outlives the rows, and is not lost twice


def test_buckets_older_than_kept_are_pruned_and_never_written(shop: Project) -> None:
    make_saga(shop, "ancient", [StepSpec("charge")], at=timezone.now() - timedelta(days=20))
    tool_rollup.rollup_fold()
    assert not ToolRollup.objects.filter(tool_name="charge").exists()
    make_saga(shop, "recent", [StepSpec("charge")], at=timezone.now() - timedelta(days=3))
    tool_rollup.rollup_fold()
    kept = set(ToolRollup.objects.values_list("granularity", flat=True))
    assert kept == {HOUR}  # 5-minute rows are kept two days, hourly ones nine
    report = tool_rollup.rollup_fold(now=timezone.now() + timedelta(days=7))
    assert report.pruned == 1 and not ToolRollup.objects.exists()


def test_projects_are_rolled_up_apart(shop: Project) -> None:
    other = Project.objects.create(slug="other", name="Other")
    make_saga(shop, "a", [StepSpec("charge")])
    make_saga(other, "a", [StepSpec("charge"), StepSpec("charge")])
    tool_rollup.rollup_fold()
    by_project = {
        slug: sum(r.runs for r in ToolRollup.objects.filter(project__slug=slug, granularity=HOUR))
        for slug in ("shop", "other")
    }
    assert by_project == {"shop": 1, "other": 2}


def test_the_command_folds_and_says_what_it_did(shop: Project) -> None:
    make_saga(shop, "a", [StepSpec("charge")])
    out = StringIO()
    call_command("sagaboard_rollup", stdout=out)
    assert "folded 1 of 1 changed sagas (1 steps" in out.getvalue()
    assert totals("charge") == (1, 0, 0, 0)
    with pytest.raises(Exception, match="--chunk 0"):
        call_command("sagaboard_rollup", "--chunk", "0")


def test_small_chunks_fold_the_same(shop: Project) -> None:
    for n in range(7):
        make_saga(shop, f"s{n}", [StepSpec("charge", ms=10 * (n + 1))])
    report = tool_rollup.rollup_fold(chunk=2)
    assert report.sagas_folded == 7 and totals("charge") == (7, 0, 0, 0)


def test_the_beat_task_runs_the_fold(shop: Project) -> None:
    from sagaboard.worker.tasks import tool_rollup_fold

    make_saga(shop, "a", [StepSpec("charge")])
    assert tool_rollup_fold()["sagas_folded"] == 1


def test_beat_runs_the_fold_every_rollup_seconds() -> None:
    from django.conf import settings

    from sagaboard.config.celery import app

    entry = app.conf.beat_schedule["tool-rollup"]
    assert entry == {"task": "sagaboard.tasks.tool_rollup_fold",
                     "schedule": settings.SAGABOARD_ROLLUP_SECONDS}  # fmt: skip

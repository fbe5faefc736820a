"""Data retention: old finished sagas go (archived if asked), everything unresolved stays."""

from __future__ import annotations

import gzip
import json
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.utils import timezone

from sagaboard.actions.services import runner
from sagaboard.approvals.services import approvals
from sagaboard.config.celery import app
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.health.services import retention
from sagaboard.health.services.retention import archive_read, retention_run, sagas_expired
from sagaboard.management.commands.sagaboard_retention import parse_age
from sagaboard.models import (
    ApiRequest,
    Approval,
    ApprovalVote,
    AuditEntry,
    CompensationAttempt,
    Event,
    Project,
    Saga,
    Step,
)
from sagaboard.worker import tasks
from tests.support.hitl import person, storebot_server_saga
from undo_core import Saga as EngineSaga
from undo_core import SagaRollbackError, define_tool

pytestmark = pytest.mark.django_db

DAYS_90 = timedelta(days=90)
OLD = timedelta(days=100)


# ------------------------------------------------------------------ sagas in every state


def completed(project: Project, saga_id: str) -> Saga:
    saga = EngineSaga("checkout", saga_id=saga_id, store=DjangoStore(project))
    saga.execute(define_tool("reserve_stock", lambda i: 1, lambda o, i: None), {"sku": 7})
    saga.complete()
    return Saga.objects.get(project=project, saga_id=saga_id)


def _fails(message: str) -> Any:
    def fail(*args: Any) -> None:
        raise ConnectionError(message)

    return fail


def rolled_back(project: Project, saga_id: str) -> Saga:
    saga = EngineSaga("checkout", saga_id=saga_id, store=DjangoStore(project))
    saga.execute(define_tool("reserve_stock", lambda i: 1, lambda o, i: None), {})
    with pytest.raises(SagaRollbackError):
        saga.execute(define_tool("charge_card", _fails("card declined")), {})
    row = Saga.objects.get(project=project, saga_id=saga_id)
    assert row.status == "ROLLED_BACK"
    return row


def rollback_failed(project: Project, saga_id: str) -> Saga:
    saga = EngineSaga("storebot-return", saga_id=saga_id, store=DjangoStore(project))
    saga.execute(define_tool("refund_payment", lambda i: 1, _fails("Stripe timed out")), {})
    with pytest.raises(SagaRollbackError):
        saga.execute(define_tool("generate_label", _fails("FedEx 500")), {})
    row = Saga.objects.get(project=project, saga_id=saga_id)
    assert row.status == "ROLLBACK_FAILED"
    return row


def in_progress(project: Project, saga_id: str) -> Saga:
    saga = EngineSaga("checkout", saga_id=saga_id, store=DjangoStore(project))
    saga.execute(define_tool("reserve_stock", lambda i: 1, lambda o, i: None), {})
    saga.release()
    return Saga.objects.get(project=project, saga_id=saga_id)


def failed(project: Project, saga_id: str) -> Saga:
    saga = EngineSaga(
        "checkout", saga_id=saga_id, store=DjangoStore(project), auto_rollback_on_failure=False
    )
    saga.execute(define_tool("reserve_stock", lambda i: 1, lambda o, i: None), {})
    with pytest.raises(ConnectionError):
        saga.execute(define_tool("charge_card", _fails("card declined")), {})
    saga.release()
    row = Saga.objects.get(project=project, saga_id=saga_id)
    assert row.status == "FAILED"
    return row


def rejected_then_rolled_back(project: Project, saga_id: str) -> Saga:
    """Server-run StoreBot: refund undo rejected (approval + vote), return undone (attempt)."""
    saga = storebot_server_saga(project, saga_id)
    runner.rollback_continue(saga.pk)
    approver = person(f"ann-{saga_id}", "approver", project)
    approval = Approval.objects.get(saga=saga, status=Approval.Status.PENDING)
    approvals.approval_decide(
        approval_id=approval.pk, user=approver, decision="reject", reason="customer keeps it"
    )
    assert runner.rollback_continue(saga.pk) == "ROLLED_BACK"
    saga.refresh_from_db()
    steps = {s.tool_name: s.state for s in saga.steps.all()}
    assert steps["refund_payment"] == "REJECTED" and steps["return_item"] == "ROLLED_BACK"
    return saga


def age(*sagas: Saga, by: timedelta = OLD) -> None:
    """Stored ``by`` ago by the server's clock (what retention reads)."""
    Saga.objects.filter(pk__in=[s.pk for s in sagas]).update(changed_at=timezone.now() - by)


def related_counts(pks: list[int]) -> dict[str, int]:
    keys = list(Saga.objects.filter(pk__in=pks).values_list("project_id", "saga_id"))
    return {
        "steps": Step.objects.filter(saga_id__in=pks).count(),
        "attempts": CompensationAttempt.objects.filter(step__saga_id__in=pks).count(),
        "approvals": Approval.objects.filter(saga_id__in=pks).count(),
        "votes": ApprovalVote.objects.filter(approval__saga_id__in=pks).count(),
        "events": Event.objects.filter(saga_id__in=pks).count(),
        "api_requests": sum(
            ApiRequest.objects.filter(project_id=p, saga_id=s).count() for p, s in keys
        ),
    }


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def world(shop: Project) -> dict[str, Saga]:
    """Old finished sagas, a recent one, and old sagas that are not at rest."""
    other = Project.objects.create(slug="other", name="Other")
    old_finished = {
        "old-completed": completed(shop, "old-completed"),
        "old-rolled-back": rolled_back(shop, "old-rolled-back"),
        "old-rejected": rejected_then_rolled_back(shop, "old-rejected"),
        "old-other": completed(other, "old-other"),
    }
    kept = {
        "recent": completed(shop, "recent"),
        "old-stuck": rollback_failed(shop, "old-stuck"),
        "old-left": rollback_failed(shop, "old-left"),
        "old-compensating": storebot_server_saga(shop, "old-compensating"),
        "old-in-progress": in_progress(shop, "old-in-progress"),
        "old-failed": failed(shop, "old-failed"),
        "old-rb-pending-approval": storebot_server_saga(shop, "old-rb-pending-approval"),
        "old-rb-pending-action": rolled_back(shop, "old-rb-pending-action"),
        "old-leased": completed(shop, "old-leased"),
    }
    # "Leave failed": still ROLLBACK_FAILED, still unresolved.
    Step.objects.filter(saga=kept["old-left"], state="ROLLBACK_FAILED").update(
        left_at=timezone.now(), left_by="user:bob", left_reason="nobody will fix it"
    )
    # Shapes a finished saga should never have, but a race could leave for a moment:
    runner.rollback_continue(kept["old-rb-pending-approval"].pk)  # its refund awaits approval
    Saga.objects.filter(pk=kept["old-rb-pending-approval"].pk).update(status="ROLLED_BACK")
    Step.objects.filter(saga=kept["old-rb-pending-action"]).update(
        pending_action={"action": "retry", "by": "user:bob", "reason": "", "at": "x"}
    )
    Saga.objects.filter(pk=kept["old-leased"].pk).update(
        lease_owner="host:1:worker", lease_expires_at=timezone.now() + timedelta(minutes=1)
    )
    age(*old_finished.values(), *(s for k, s in kept.items() if k != "recent"))
    age(kept["recent"], by=timedelta(days=89))
    return {**old_finished, **kept}


def saga_ids() -> set[str]:
    return set(Saga.objects.values_list("saga_id", flat=True))


OLD_FINISHED = {"old-completed", "old-rolled-back", "old-rejected", "old-other"}


# ------------------------------------------------------------------ which sagas go


def test_expired_are_exactly_the_old_finished_sagas_at_rest(world: dict[str, Saga]) -> None:
    expired = sagas_expired(timezone.now(), DAYS_90)
    assert set(expired.values_list("saga_id", flat=True)) == OLD_FINISHED
    # Every unresolved status is there, however old: none of them is expired.
    statuses = {s.status for s in Saga.objects.exclude(saga_id__in=OLD_FINISHED)}
    assert {"ROLLBACK_FAILED", "COMPENSATING", "IN_PROGRESS", "FAILED"} <= statuses
    # A shorter age takes the recent one as well.
    assert "recent" in sagas_expired(timezone.now(), timedelta(days=30)).values_list(
        "saga_id", flat=True
    )


def test_old_finished_sagas_go_with_everything_they_own(world: dict[str, Saga]) -> None:
    gone = [world[k].pk for k in OLD_FINISHED]
    before = related_counts(gone)
    assert before["approvals"] == 1 and before["votes"] == 1 and before["attempts"] >= 1
    assert before["api_requests"] > 0  # old-rejected was posted through the manual-flow API
    decisions = AuditEntry.objects.filter(action="approval.reject").count()
    kept_rows = related_counts([s.pk for k, s in world.items() if k not in OLD_FINISHED])

    report = retention_run(older_than=DAYS_90)

    assert saga_ids() == set(world) - OLD_FINISHED
    assert related_counts(gone) == dict.fromkeys(before, 0)
    assert related_counts([s.pk for k, s in world.items() if k not in OLD_FINISHED]) == kept_rows
    assert (report.sagas, report.skipped, report.batches, report.more) == (4, 0, 1, False)
    assert {k: getattr(report, k) for k in before} == before
    assert report.by_project == {"other": 1, "shop": 3}
    # Who did what stays: the decision's audit entry outlives its saga.
    assert AuditEntry.objects.filter(action="approval.reject").count() == decisions == 1


def test_a_second_run_finds_nothing(world: dict[str, Saga]) -> None:
    retention_run(older_than=DAYS_90)
    again = retention_run(older_than=DAYS_90)
    assert (again.sagas, again.events, again.batches) == (0, 0, 0)
    assert saga_ids() == set(world) - OLD_FINISHED


def test_batches_of_two_take_five_sagas_in_three(shop: Project) -> None:
    age(*(completed(shop, f"ok-{n}") for n in range(5)))
    report = retention_run(older_than=DAYS_90, batch=2)
    assert (report.sagas, report.batches, report.more) == (5, 3, False)
    assert not Saga.objects.exists()


def test_max_batches_stops_early_and_says_more_are_left(shop: Project) -> None:
    age(*(completed(shop, f"ok-{n}") for n in range(5)))
    report = retention_run(older_than=DAYS_90, batch=2, max_batches=2)
    assert (report.sagas, report.batches, report.more) == (4, 2, True)
    assert Saga.objects.count() == 1
    rest = retention_run(older_than=DAYS_90, batch=2, max_batches=2)
    assert (rest.sagas, rest.more) == (1, False)


def test_the_oldest_go_first(shop: Project) -> None:
    for n in range(4):
        age(completed(shop, f"ok-{n}"), by=OLD + timedelta(days=n))
    report = retention_run(older_than=DAYS_90, batch=1, max_batches=2)
    assert report.examples == ["shop/ok-3", "shop/ok-2"]


def test_a_saga_that_changes_after_it_was_picked_is_skipped(
    shop: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    sagas = [completed(shop, f"ok-{n}") for n in range(3)]
    age(*sagas)
    pick = retention._candidates

    def pick_then_someone_rolls_one_back(*args: Any) -> Any:
        picked = pick(*args)
        Saga.objects.filter(pk=sagas[1].pk).update(status="COMPENSATING")
        return picked

    monkeypatch.setattr(retention, "_candidates", pick_then_someone_rolls_one_back)
    report = retention_run(older_than=DAYS_90)
    assert (report.sagas, report.skipped) == (2, 1)
    assert saga_ids() == {"ok-1"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    not connection.features.has_select_for_update_skip_locked,
    reason="row locks: PostgreSQL (SQLite serialises writers instead)",
)
def test_a_saga_locked_by_another_writer_is_skipped_not_waited_for() -> None:
    shop = Project.objects.create(slug="shop", name="Shop")
    sagas = [completed(shop, f"ok-{n}") for n in range(3)]
    age(*sagas)
    locked, release = threading.Event(), threading.Event()

    def writer() -> None:
        try:
            with transaction.atomic():
                Saga.objects.select_for_update().get(pk=sagas[0].pk)
                locked.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert locked.wait(10)
        report = retention_run(older_than=DAYS_90)
    finally:
        release.set()
        thread.join()
    assert (report.sagas, report.skipped) == (2, 1)
    assert saga_ids() == {"ok-0"}
    assert retention_run(older_than=DAYS_90).sagas == 1  # next time it goes


def test_bad_arguments_are_refused_before_anything_goes(shop: Project, tmp_path: Path) -> None:
    age(completed(shop, "ok"))
    for kwargs in ({"older_than": timedelta(0)}, {"older_than": DAYS_90, "batch": 0}):
        with pytest.raises(ValueError):
            retention_run(**kwargs)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(ValueError, match="archive directory"):
        retention_run(older_than=DAYS_90, archive_dir=not_a_dir / "sub")
    assert saga_ids() == {"ok"}


# ------------------------------------------------------------------ dry run, archive, audit


def test_a_dry_run_counts_and_changes_nothing(world: dict[str, Saga], tmp_path: Path) -> None:
    rows = related_counts([s.pk for s in world.values()])
    audits = AuditEntry.objects.count()
    report = retention_run(older_than=DAYS_90, dry_run=True, archive_dir=tmp_path, batch=2)
    assert report.dry_run and report.sagas == 4 and report.batches == 2
    assert report.steps == related_counts([world[k].pk for k in OLD_FINISHED])["steps"]
    assert sorted(report.examples) == sorted(f"{world[k].project.slug}/{k}" for k in OLD_FINISHED)
    assert saga_ids() == set(world)
    assert related_counts([s.pk for s in world.values()]) == rows
    assert AuditEntry.objects.count() == audits
    assert report.archive_path is None and list(tmp_path.iterdir()) == []


def test_the_archive_holds_exactly_the_deleted_sagas(
    world: dict[str, Saga], tmp_path: Path
) -> None:
    expected = related_counts([world[k].pk for k in OLD_FINISHED])
    report = retention_run(older_than=DAYS_90, archive_dir=tmp_path / "archive", batch=3)
    assert report.batches == 2  # two gzip members, read back as one stream
    path = report.archive_path
    assert path is not None and path.parent == tmp_path / "archive"
    assert path.name.startswith("sagaboard-retention-") and path.name.endswith(".jsonl.gz")
    lines = archive_read(path)
    assert sorted(line["saga"]["saga_id"] for line in lines) == sorted(OLD_FINISHED)
    with gzip.open(path, "rt") as plain:  # any gzip reader reads it
        assert len(plain.read().splitlines()) == 4
    assert {line["project"] for line in lines} == {"shop", "other"}
    assert sum(len(line["steps"]) for line in lines) == expected["steps"]
    assert sum(len(s["attempts"]) for line in lines for s in line["steps"]) == expected["attempts"]
    assert sum(len(line["events"]) for line in lines) == expected["events"]
    assert sum(len(line["api_requests"]) for line in lines) == expected["api_requests"]
    rejected = next(line for line in lines if line["saga"]["saga_id"] == "old-rejected")
    assert rejected["format"] == retention.ARCHIVE_FORMAT
    assert rejected["saga"]["status"] == "ROLLED_BACK"
    steps = {s["tool_name"]: s for s in rejected["steps"]}
    assert steps["refund_payment"]["state"] == "REJECTED"
    assert steps["refund_payment"]["input"] == {
        "chargeId": "ch_882",
        "amount": 120,
        "currency": "EUR",
    }
    (approval,) = rejected["approvals"]
    assert approval["status"] == "REJECTED"
    assert [(v["username"], v["decision"], v["reason"]) for v in approval["votes"]] == [
        ("ann-old-rejected", "reject", "customer keeps it")
    ]
    assert any(
        (e["kind"], e["actor"]) == ("approval.reject", "user:ann-old-rejected")
        for e in rejected["events"]
    )


def test_an_archive_write_that_fails_deletes_nothing_of_its_batch(
    shop: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(4):
        age(completed(shop, f"ok-{n}"), by=OLD + timedelta(days=4 - n))
    synced: list[int] = []

    def fsync_then_disk_full(fd: int) -> None:
        if synced:
            raise OSError(28, "No space left on device")
        synced.append(fd)

    monkeypatch.setattr(retention.os, "fsync", fsync_then_disk_full)
    with pytest.raises(OSError, match="No space left"):
        retention_run(older_than=DAYS_90, archive_dir=tmp_path, batch=2)
    assert saga_ids() == {"ok-2", "ok-3"}  # the first batch went, the second stayed
    (path,) = tmp_path.iterdir()
    assert [line["saga"]["saga_id"] for line in archive_read(path)] == ["ok-0", "ok-1"]
    entry = AuditEntry.objects.get(action="retention.run")
    assert entry.data["sagas"] == 2 and "No space left" in entry.data["error"]


def test_each_run_writes_its_own_archive_file(shop: Project, tmp_path: Path) -> None:
    age(completed(shop, "a"))
    first = retention_run(older_than=DAYS_90, archive_dir=tmp_path)
    age(completed(shop, "b"))
    second = retention_run(older_than=DAYS_90, archive_dir=tmp_path)
    assert first.archive_path != second.archive_path
    assert [line["saga"]["saga_id"] for line in archive_read(first.archive_path)] == ["a"]
    assert [line["saga"]["saga_id"] for line in archive_read(second.archive_path)] == ["b"]


def test_a_run_is_audited_with_its_counts(world: dict[str, Saga]) -> None:
    report = retention_run(older_than=DAYS_90)
    entry = AuditEntry.objects.get(action="retention.run")
    assert entry.actor == "system:retention" and entry.project is None
    assert entry.data["sagas"] == 4 and entry.data["events"] == report.events
    assert entry.data["by_project"] == {"other": 1, "shop": 3}
    assert json.loads(json.dumps(entry.data)) == report.counts()


# ------------------------------------------------------------------ the command


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90d", timedelta(days=90)),
        ("90", timedelta(days=90)),
        ("90 days", timedelta(days=90)),
        ("1 day", timedelta(days=1)),
        ("12h", timedelta(hours=12)),
        ("36H", timedelta(hours=36)),
    ],
)
def test_ages_the_command_accepts(text: str, expected: timedelta) -> None:
    assert parse_age(text) == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--older-than", "yesterday"], "--older-than 'yesterday': give a number of days"),
        (["--older-than", "90m"], "--older-than '90m'"),
        (["--older-than=-5d"], "--older-than '-5d'"),
        (["--older-than", "0d"], "the age must be more than 0"),
        (["--older-than", "90d", "--batch", "0"], "--batch 0: give 1 to 5000"),
        (["--older-than", "90d", "--batch", "100000"], "--batch 100000"),
        (["--older-than", "90d", "--max-batches", "0"], "--max-batches 0"),
    ],
)
def test_the_command_refuses_bad_input_clearly(
    shop: Project, args: list[str], message: str
) -> None:
    age(completed(shop, "ok"))
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        call_command("sagaboard_retention", *args)
    assert saga_ids() == {"ok"}


def test_the_command_refuses_a_file_as_archive_dir(shop: Project, tmp_path: Path) -> None:
    age(completed(shop, "ok"))
    (tmp_path / "f").write_text("")
    with pytest.raises(CommandError, match="is not a directory"):
        call_command("sagaboard_retention", "--archive-dir", str(tmp_path / "f"))
    assert saga_ids() == {"ok"}


def test_the_command_uses_the_setting_and_refuses_when_it_is_off(
    shop: Project, settings: Any
) -> None:
    age(completed(shop, "ok"))
    settings.SAGABOARD_RETENTION_DAYS = 0
    with pytest.raises(CommandError, match="retention is off"):
        call_command("sagaboard_retention")
    settings.SAGABOARD_RETENTION_DAYS = 101
    call_command("sagaboard_retention")
    assert saga_ids() == {"ok"}  # 100 days old: younger than 101
    settings.SAGABOARD_RETENTION_DAYS = 99
    call_command("sagaboard_retention")
    assert saga_ids() == set()


def test_the_command_dry_run_prints_what_would_go(
    world: dict[str, Saga], capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("sagaboard_retention", "--older-than", "90d", "--dry-run")
    out = capsys.readouterr().out
    assert "would delete 4 saga(s)" in out and "older than 90 day(s)" in out
    assert "shop\t3" in out and "other\t1" in out and "shop/old-rejected" in out
    assert "dry run: nothing was deleted" in out
    assert saga_ids() == set(world)


def test_the_command_archives_deletes_and_is_audited_as_cli(
    world: dict[str, Saga], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command(
        "sagaboard_retention",
        "--older-than",
        "2160h",
        "--archive-dir",
        str(tmp_path),
        "--batch",
        "2",
    )
    out = capsys.readouterr().out
    assert "deleted 4 saga(s)" in out and "done in 2 batch(es)" in out
    (path,) = tmp_path.iterdir()
    assert f"archive: {path}" in out
    assert len(archive_read(path)) == 4
    assert saga_ids() == set(world) - OLD_FINISHED
    entry = AuditEntry.objects.get(action="retention.run")
    assert entry.actor == "cli" and entry.data["archive"] == str(path)


# ------------------------------------------------------------------ the daily task


def test_the_beat_runs_retention_daily() -> None:
    entry = app.conf.beat_schedule["retention"]
    assert entry["task"] == "sagaboard.tasks.retention_sweep"
    assert entry["schedule"].hour == {3} and entry["schedule"].minute == {30}


def test_the_task_deletes_with_the_setting_or_does_nothing_when_off(
    world: dict[str, Saga], settings: Any
) -> None:
    settings.SAGABOARD_RETENTION_DAYS = 0
    assert tasks.retention_sweep() == {"off": True}
    assert saga_ids() == set(world)
    settings.SAGABOARD_RETENTION_DAYS = 90
    result = tasks.retention_sweep()
    assert result["sagas"] == 4 and result["more"] is False
    assert saga_ids() == set(world) - OLD_FINISHED
    assert AuditEntry.objects.get(action="retention.run").actor == "system:retention"


def test_the_task_queues_itself_again_while_more_are_left(
    shop: Project, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.SAGABOARD_RETENTION_DAYS = 90
    age(*(completed(shop, f"ok-{n}") for n in range(3)))
    queued: list[dict[str, Any]] = []
    monkeypatch.setattr(
        tasks.retention_sweep, "apply_async", lambda **kwargs: queued.append(kwargs)
    )
    real = retention.retention_run
    monkeypatch.setattr(retention, "retention_run", lambda **kwargs: real(**{**kwargs, "batch": 1}))
    assert tasks.retention_sweep(max_batches=2)["more"] is True
    assert queued == [{"kwargs": {"max_batches": 2}, "countdown": 1}]
    assert tasks.retention_sweep(max_batches=2)["more"] is False
    assert len(queued) == 1 and saga_ids() == set()

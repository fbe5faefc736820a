"""The overview's rollup equals a fresh count of the sagas after every kind of write: API
ingestion (one event, batches), DjangoStore (engine, workers), status changes, queryset
updates, retention and other deletes; rebuilt and checked by its command; its triggers
put back if a migration dropped them; and on PostgreSQL, writers racing on the same
bucket lose nothing and never deadlock."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.health.reads import overview
from sagaboard.health.services import overview_rollup
from sagaboard.health.services.retention import retention_run
from sagaboard.models import Project, Saga, SagaCount, Step
from sagaboard.models.overview import EPOCH, TOTALS, fold_changes
from tests.support import racing
from tests.support.agent_runs import post_events, storebot_events
from undo_core import Saga as EngineSaga
from undo_core import SagaRollbackError, define_tool

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))

pytestmark = pytest.mark.django_db


def agrees() -> bool:
    """The rollup (folded or not) is exactly what a scan of the sagas gives."""
    differences = overview_rollup.check()
    assert differences == [], [str(d) for d in differences]
    return True


def chips(project: Project) -> dict[str, int]:
    return {c.status: c.count for c in overview.status_counts([project], fresh=True)}


def scanned_chips(project: Project) -> dict[str, int]:
    """The overview's counts as the page counted them before the rollup: a query each."""
    sagas = Saga.objects.filter(project=project)
    counts = {s: sagas.filter(status=s).count() for s in overview.SagaStatus}
    counts["ROLLED_BACK"] = sagas.filter(outcome="CLEAN").count()
    counts["ROLLED_BACK_WITH_EXCEPTIONS"] = sagas.filter(
        status="ROLLED_BACK", outcome="WITH_EXCEPTIONS"
    ).count()
    counts["WAITING"] = sagas.filter(waiting_for__isnull=False).count()
    return counts


@pytest.fixture
def shop() -> Project:
    cache.clear()
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def post(client: Client, shop: Project) -> Any:
    token = token_create(project=shop, label="rollup").secret

    def post(events: list[dict[str, Any]]) -> None:
        response = post_events(client, token, events)
        assert response.status_code == 200, response.content

    return post


def completed(project: Project, saga_id: str) -> None:
    saga = EngineSaga("checkout", saga_id=saga_id, store=_store(project))
    saga.execute(define_tool("reserve_stock", lambda i: 1, lambda o, i: None), {})
    saga.complete()


def running(project: Project, saga_id: str) -> EngineSaga:
    saga = EngineSaga("checkout", saga_id=saga_id, store=_store(project))
    saga.execute(define_tool("reserve_stock", lambda i: 1, lambda o, i: None), {})
    return saga


def _store(project: Project) -> Any:
    from sagaboard.engine.services.django_store import DjangoStore

    return DjangoStore(project)


def test_events_posted_one_at_a_time_are_counted(post: Any, shop: Project) -> None:
    for event in storebot_events("one-by-one"):
        post([event])
    assert agrees() and chips(shop)["ROLLED_BACK"] == 1 and chips(shop)["IN_PROGRESS"] == 0


def test_a_batch_of_many_sagas_is_counted(post: Any, shop: Project) -> None:
    post([e for n in range(6) for e in storebot_events(f"bulk-{n}")])
    assert agrees() and chips(shop) == scanned_chips(shop)
    assert chips(shop)["ROLLED_BACK"] == 6


def test_a_saga_moving_from_running_to_rolled_back_moves_its_count(shop: Project) -> None:
    saga = running(shop, "moving")
    assert chips(shop)["IN_PROGRESS"] == 1 and chips(shop)["ROLLED_BACK"] == 0
    with pytest.raises(SagaRollbackError):
        saga.execute(define_tool("fails", lambda i: 1 / 0), {})
    assert chips(shop)["IN_PROGRESS"] == 0 and chips(shop)["ROLLED_BACK"] == 1
    assert agrees()


def test_the_engines_transitions_and_a_failed_rollback_are_counted(shop: Project) -> None:
    completed(shop, "ok")

    def undo_fails(o: Any, i: Any) -> None:
        raise TimeoutError("Stripe API timed out")

    stuck = EngineSaga("storebot-return", saga_id="stuck", store=_store(shop))
    stuck.execute(define_tool("refund_payment", lambda i: {"refund": 1}, undo_fails), {})
    with pytest.raises(SagaRollbackError):
        stuck.execute(define_tool("generate_label", lambda i: 1 / 0), {})
    assert agrees() and chips(shop) == scanned_chips(shop)
    assert chips(shop)["ROLLBACK_FAILED"] == 1 and chips(shop)["COMPLETED"] == 1


def test_queryset_updates_move_counts_and_buckets(shop: Project) -> None:
    for n in range(3):
        completed(shop, f"c-{n}")
    then = datetime(2026, 11, 29, 12, 2, tzinfo=UTC)
    Saga.objects.filter(saga_id="c-0").update(changed_at=then)
    Saga.objects.filter(saga_id="c-1").update(status="FAILED", outcome=None)
    Saga.objects.filter(saga_id="c-2").update(waiting_for="OPERATOR")
    assert agrees() and chips(shop) == scanned_chips(shop)
    hour = overview._throughput([shop.pk], "hour", then)
    assert hour[-1].by_status == {"COMPLETED": 1}


def test_retention_and_other_deletes_take_their_counts_away(post: Any, shop: Project) -> None:
    post([e for n in range(3) for e in storebot_events(f"old-{n}")])
    completed(shop, "kept")
    Saga.objects.filter(saga_id__startswith="old-").update(
        changed_at=datetime.now(UTC) - timedelta(days=60)
    )
    report = retention_run(older_than=timedelta(days=30))
    assert report.sagas == 3 and agrees() and chips(shop)["ROLLED_BACK"] == 0
    Step.objects.filter(saga__saga_id="kept").delete()  # steps count nowhere: nothing moves
    Saga.objects.filter(saga_id="kept").delete()
    assert agrees() and chips(shop)["COMPLETED"] == 0


def test_a_deleted_project_leaves_no_counts(shop: Project) -> None:
    completed(shop, "c")
    fold_changes()
    shop.delete()
    assert agrees() and not SagaCount.objects.exists()


def test_the_overview_on_the_demo_shows_what_a_scan_counts(client: Client) -> None:
    call_command("sagaboard_demo", "--force", stdout=StringIO())
    demo = Project.objects.get(slug="demo")
    assert agrees() and chips(demo) == scanned_chips(demo)
    client.login(username="demo", password="demo")
    page = client.get("/overview/").content.decode()
    assert f"<strong>{scanned_chips(demo)['COMPLETED']}</strong>" in page


def test_the_command_rebuilds_what_was_lost_and_checks(shop: Project) -> None:
    for n in range(2):
        completed(shop, f"c-{n}")
    fold_changes()
    SagaCount.objects.filter(key="COMPLETED", span=TOTALS).update(n=7)
    with pytest.raises(CommandError, match="1 difference"):
        call_command("sagaboard_overview_rollup", "--check", stdout=StringIO())
    out = StringIO()
    call_command("sagaboard_overview_rollup", "--rebuild", stdout=out)
    assert "rows" in out.getvalue() and agrees() and chips(shop)["COMPLETED"] == 2
    call_command("sagaboard_overview_rollup", "--check", stdout=StringIO())


def test_the_command_says_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        call_command("sagaboard_overview_rollup", "--help")
    out = capsys.readouterr().out
    assert "--rebuild" in out and "--check" in out and "triggers" in out


def test_triggers_a_migration_dropped_are_put_back_and_the_counts_recounted(
    shop: Project,
) -> None:
    completed(shop, "before")
    with connection.cursor() as cursor:
        on = " ON sagaboard_saga" if connection.vendor == "postgresql" else ""
        cursor.execute(f"DROP TRIGGER sagaboard_saga_count_insert{on}")
    completed(shop, "unseen")  # while the trigger was gone
    assert overview_rollup.ensure_triggers() == ["sagaboard_saga_count_insert"]
    completed(shop, "after")
    assert agrees() and chips(shop)["COMPLETED"] == 3
    assert overview_rollup.ensure_triggers() == []


def test_pending_changes_count_before_they_are_folded(shop: Project) -> None:
    completed(shop, "c")
    counted = chips(shop)
    fold_changes()
    assert chips(shop) == counted
    assert SagaCount.objects.get(span=TOTALS, bucket_start=EPOCH, key="COMPLETED").n == 1


@pytest.mark.slow  # threads racing on real transactions
@pytest.mark.skipif(not PG, reason="SQLite serialises writers: nothing races")
@pytest.mark.django_db(transaction=True)
def test_writers_racing_on_one_bucket_lose_nothing_and_never_deadlock() -> None:
    project = Project.objects.create(slug="race", name="Race")
    now = datetime.now(UTC)
    errors: list[BaseException] = []
    start = racing.Start(4)

    def writer(worker: int) -> None:
        # Each commit creates sagas and moves others both ways between two statuses (the
        # orders that deadlock two upserts on shared counter rows), in the same buckets.
        try:
            start.wait(worker)
            for round_ in range(25):
                with transaction.atomic():
                    for k in range(4):
                        Saga.objects.create(
                            project=project,
                            saga_id=f"w{worker}-{round_}-{k}",
                            name="race",
                            status="ROLLBACK_FAILED" if k % 2 else "COMPENSATING",
                            created_at=now,
                            updated_at=now,
                        )
                    mine = Saga.objects.filter(project=project, saga_id__startswith=f"w{worker}-")
                    first, second = ("COMPENSATING", "ROLLBACK_FAILED")[:: 1 if worker % 2 else -1]
                    mine.filter(status=first).update(status=second)
                    mine.filter(status=second, saga_id__endswith="-0").update(status=first)
                if round_ % 5 == 0:
                    fold_changes()
        except BaseException as err:  # reported below, with the thread's own traceback
            errors.append(err)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert Saga.objects.filter(project=project).count() == 4 * 25 * 4
    assert agrees()
    fold_changes()
    assert agrees() and sum(chips(project).values()) == 400


def test_verify_reports_a_rollup_that_differs_from_a_scan(shop: Project) -> None:
    completed(shop, "c")
    fold_changes()
    out = StringIO()
    call_command("sagaboard_verify", stdout=out)
    assert "overview rollup: 0 difference(s)" in out.getvalue()
    SagaCount.objects.filter(key="COMPLETED", span=TOTALS).update(n=5)
    with pytest.raises(CommandError, match="overview rollup: 1 difference"):
        call_command("sagaboard_verify", stdout=StringIO())

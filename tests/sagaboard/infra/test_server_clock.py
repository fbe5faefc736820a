"""The agent's clock is reported, never trusted: the server's own times order, filter and delete."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sagaboard.access.reads import visible
from sagaboard.access.services.roles import roles_sync
from sagaboard.access.services.tokens import token_create
from sagaboard.actions.services import operator_actions, runner
from sagaboard.config.asgi import application
from sagaboard.config.env import env_seconds
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.health.reads import overview
from sagaboard.health.services.retention import retention_run
from sagaboard.infra import clock
from sagaboard.live.relay import stop_all
from sagaboard.models import Event, Project, Saga, Step
from sagaboard.record.services import manual_flow
from tests.support.agent_runs import Recorder, post_events
from undo_core import Saga as EngineSaga
from undo_core import SagaRollbackError, define_tool
from undo_core.testing import FakeClock

pytestmark = pytest.mark.django_db

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[3]
RESERVE = define_tool("reserve_stock", lambda i: {"ok": True}, lambda o, i: None)
BADGE = "agent clock: reported"


def agent_run(saga_id: str, clock_at: datetime, *, fail: bool = False) -> list[dict[str, Any]]:
    """A saga run in an agent whose clock reads ``clock_at``, as its SDK sends it."""
    store = Recorder()
    saga = EngineSaga("checkout", store=store, saga_id=saga_id, clock=FakeClock(clock_at))
    saga.execute(RESERVE, {"sku": "A-1"})
    if fail:

        def declined(i: Any) -> None:
            raise ConnectionError("card declined")

        with pytest.raises(SagaRollbackError):
            saga.execute(define_tool("charge_card", declined), {})
    else:
        saga.complete()
    return store.sent


def post(client: Client, token: str, events: list[dict[str, Any]]) -> None:
    response = post_events(client, token, events)
    assert response.status_code == 200, response.content


@pytest.fixture
def world(client: Client) -> dict[str, Any]:
    cache.clear()
    shop = Project.objects.create(slug="shop", name="Shop")
    user = get_user_model().objects.create_user("alice", password="pw-alice-123")
    shop.members.add(user)
    user.groups.add(Group.objects.get(name="viewer"))
    api = Client()
    token = token_create(project=shop, label="storebot").secret

    def send(saga_id: str, clock_at: datetime, **kwargs: Any) -> Saga:
        post(api, token, agent_run(saga_id, clock_at, **kwargs))
        return Saga.objects.get(project=shop, saga_id=saga_id)

    def api_get(path: str, **params: Any) -> Any:
        response = api.get(f"/api/v1{path}", params, headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.content
        return response.json()

    client.force_login(user)
    return {"client": client, "shop": shop, "send": send, "api_get": api_get}


def listed(page: str, *saga_ids: str) -> list[str]:
    """The given saga ids in the order the page shows them."""
    return sorted((s for s in saga_ids if s in page), key=page.index)


# ------------------------------------------------------------------ every write path


def test_ingestion_stamps_the_servers_clock_whatever_the_agent_says(world: dict[str, Any]) -> None:
    before = timezone.now()
    saga = world["send"]("epoch", EPOCH)
    after = timezone.now()
    assert saga.created_at == EPOCH and saga.updated_at == EPOCH  # kept as reported
    assert before <= saga.received_at <= saga.changed_at <= after
    step = saga.steps.get()
    assert step.updated_at == EPOCH and before <= step.changed_at <= after
    newest = Event.objects.filter(saga=saga).order_by("-pk").first()
    assert newest is not None and newest.recorded_at == saga.changed_at and newest.at == EPOCH


def test_a_later_batch_moves_changed_at_but_never_received_at(world: dict[str, Any]) -> None:
    events = agent_run("twice", FAR_FUTURE)
    client, token = Client(), token_create(project=world["shop"], label="two").secret
    post(client, token, events[:2])
    first = Saga.objects.get(saga_id="twice")
    post(client, token, events[2:])
    later = Saga.objects.get(saga_id="twice")
    assert later.received_at == first.received_at and later.changed_at > first.changed_at
    assert later.updated_at == FAR_FUTURE


def test_server_run_sagas_and_the_manual_flow_api_stamp_the_servers_clock(
    world: dict[str, Any],
) -> None:
    shop = world["shop"]
    before = timezone.now()
    engine = EngineSaga("checkout", saga_id="engine", store=DjangoStore(shop), clock=FakeClock())
    engine.execute(RESERVE, {})
    engine.complete()
    row = Saga.objects.get(saga_id="engine")
    assert row.updated_at == datetime(2026, 1, 1, tzinfo=UTC)  # the engine's (fake) clock
    assert before <= row.received_at <= row.changed_at <= timezone.now()

    sid = manual_flow.saga_begin(project=shop, event_id="b-1", name="manual", saga_id="manual")
    begun = Saga.objects.get(saga_id=sid)
    step_id = manual_flow.step_add(
        project=shop,
        event_id="a-1",
        saga_id=sid,
        tool_name="reserve_stock",
        input={},
        undo={"kind": "none"},  # a 'client' undo cannot run in a saga sagaboard runs: refused
    )
    added = Saga.objects.get(saga_id=sid)
    assert added.received_at == begun.received_at and added.changed_at > begun.changed_at
    manual_flow.step_complete(project=shop, event_id="c-1", saga_id=sid, step_id=step_id, output={})
    done = Saga.objects.get(saga_id=sid)
    assert done.changed_at > added.changed_at
    assert done.steps.get().changed_at == done.changed_at


def test_an_operators_request_is_its_own_event_and_leaves_changed_at_to_the_move_it_causes(
    world: dict[str, Any],
) -> None:
    """Leaving an undo failed changes no saga record: the operator's event has its own
    server time, and lists keep the saga where its last transition put it."""

    def undo_fails(o: Any, i: Any) -> None:
        raise TimeoutError("Stripe timed out")

    def label_fails(i: Any) -> None:
        raise ConnectionError("FedEx 500")

    shop = world["shop"]
    engine = EngineSaga("storebot", saga_id="stuck", store=DjangoStore(shop))
    engine.execute(define_tool("refund_payment", lambda i: 1, undo_fails), {})
    with pytest.raises(SagaRollbackError):
        engine.execute(define_tool("generate_label", label_fails), {})
    saga = Saga.objects.get(saga_id="stuck")
    failed = saga.steps.get(state="ROLLBACK_FAILED")
    operator = get_user_model().objects.create_user("olga", password="pw-olga-1234")
    shop.members.add(operator)
    operator.groups.add(Group.objects.get(name="operator"))
    operator_actions.step_act(step_pk=failed.pk, user=operator, action="leave", reason="by hand")
    after = Saga.objects.get(pk=saga.pk)
    assert after.changed_at == saga.changed_at
    left = Event.objects.filter(saga=saga, kind="step.leave").get()
    assert left.recorded_at >= saga.changed_at


# ------------------------------------------------------------------ lists and filters


def test_a_saga_from_an_agent_in_1970_sorts_by_arrival(world: dict[str, Any]) -> None:
    world["send"]("first", timezone.now())
    world["send"]("from-1970", EPOCH)
    page = world["client"].get("/").content.decode()
    assert listed(page, "first", "from-1970") == ["from-1970", "first"]
    items = world["api_get"]("/sagas")["items"]
    assert [s["id"] for s in items] == ["from-1970", "first"]


def test_a_saga_dated_9999_does_not_stay_on_top_once_newer_sagas_arrive(
    world: dict[str, Any],
) -> None:
    world["send"]("from-9999", FAR_FUTURE)
    for n in range(3):
        world["send"](f"later-{n}", timezone.now())
    page = world["client"].get("/").content.decode()
    names = ("from-9999", "later-0", "later-1", "later-2")
    assert listed(page, *names) == ["later-2", "later-1", "later-0", "from-9999"]
    # Page by page through the cursor, the same order: the cursor is the server's time too.
    seen, cursor = [], None
    while True:
        page_of = world["api_get"]("/sagas", limit=1, **({"cursor": cursor} if cursor else {}))
        seen += [s["id"] for s in page_of["items"]]
        cursor = page_of["next_cursor"]
        if cursor is None:
            break
    assert seen == ["later-2", "later-1", "later-0", "from-9999"]


def test_the_last_hour_filter_uses_the_servers_clock(world: dict[str, Any]) -> None:
    world["send"]("from-1970", EPOCH)
    stored_long_ago = world["send"]("agent-says-now", timezone.now())
    Saga.objects.filter(pk=stored_long_ago.pk).update(
        changed_at=timezone.now() - timedelta(hours=3)
    )
    page = world["client"].get("/?since=1h").content.decode()
    assert "from-1970" in page and "agent-says-now" not in page
    hour_ago = (timezone.now() - timedelta(hours=1)).isoformat()
    items = world["api_get"]("/sagas", updated_after=hour_ago)["items"]
    assert [s["id"] for s in items] == ["from-1970"]
    items = world["api_get"]("/sagas", updated_before=hour_ago)["items"]
    assert [s["id"] for s in items] == ["agent-says-now"]


def test_the_list_pages_are_read_in_index_order(world: dict[str, Any]) -> None:
    """Every variant of the list page's query is served by an index in its ORDER BY."""
    shop = world["shop"]
    for n in range(3):
        world["send"](f"s-{n}", EPOCH)
    _, cursor = visible.saga_list(projects=[shop], limit=1)
    variants: list[dict[str, Any]] = [
        {},
        {"cursor": cursor},
        {"statuses": ["COMPLETED"]},
        {"statuses": ["COMPLETED"], "cursor": cursor},
        {"updated_after": timezone.now() - timedelta(hours=1)},
    ]
    for variant in variants:
        with CaptureQueriesContext(connection) as ctx:
            visible.saga_list(projects=[shop], limit=50, **variant)
        (query,) = ctx.captured_queries
        plan = explain(query["sql"])
        assert "saga_project_" in plan and "sort" not in plan.lower().replace("sort key", ""), (
            variant,
            plan,
        )


def explain(sql: str) -> str:
    """The query's plan; on PostgreSQL with scans and sorts priced out, so that a plan that
    still sorts has no index that yields the order (tiny test tables hide that otherwise)."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            return plan.replace("Sort Key", "")  # a pre-sorted index scan names no Sort node
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
        return plan.replace("TEMP B-TREE FOR ORDER BY", "SORT")


# ------------------------------------------------------------------ charts and retention


def test_the_charts_count_by_server_time(world: dict[str, Any]) -> None:
    world["send"]("from-1970", EPOCH)
    world["send"]("from-9999", FAR_FUTURE, fail=True)
    hour = overview._throughput([world["shop"].pk], "hour", timezone.now())
    counted: dict[str, int] = {}
    for bucket in hour[-2:]:  # this bucket (or the one before, had it just begun)
        for status, n in bucket.by_status.items():
            counted[status] = counted.get(status, 0) + n
    assert counted == {"COMPLETED": 1, "ROLLED_BACK": 1}
    failures = overview.recent_failures([world["shop"]])
    assert [s.saga_id for s in failures] == ["from-9999"]


def test_a_saga_posted_now_with_a_1970_clock_is_not_deleted_by_retention(
    world: dict[str, Any],
) -> None:
    saga = world["send"]("from-1970", EPOCH)
    dry = retention_run(older_than=timedelta(days=90), dry_run=True)
    assert dry.sagas == 0
    real = retention_run(older_than=timedelta(days=90))
    assert real.sagas == 0 and Saga.objects.filter(pk=saga.pk).exists()


def test_retention_dry_run_and_delete_go_by_when_the_server_stored_the_saga(
    world: dict[str, Any],
) -> None:
    kept_9999 = world["send"]("from-9999", FAR_FUTURE)
    old_9999 = world["send"]("old-9999", FAR_FUTURE)
    old_now = world["send"]("old-agent-says-now", timezone.now())
    hundred_days_ago = timezone.now() - timedelta(days=100)
    Saga.objects.filter(pk__in=[old_9999.pk, old_now.pk]).update(changed_at=hundred_days_ago)
    dry = retention_run(older_than=timedelta(days=90), dry_run=True)
    assert dry.sagas == 2 and sorted(dry.examples) == [
        "shop/old-9999",
        "shop/old-agent-says-now",
    ]
    assert Saga.objects.count() == 3
    real = retention_run(older_than=timedelta(days=90))
    assert real.sagas == 2
    assert list(Saga.objects.values_list("pk", flat=True)) == [kept_9999.pk]


def test_the_sweep_for_lost_work_goes_by_when_the_server_stored_the_change(
    world: dict[str, Any],
) -> None:
    engine = EngineSaga("checkout", saga_id="lost", store=DjangoStore(world["shop"]))
    engine.execute(RESERVE, {})
    engine.release()
    lost = Saga.objects.filter(saga_id="lost")
    lost.update(status="COMPENSATING", lease_owner=None, lease_expires_at=None)
    now = timezone.now()
    lost.update(updated_at=now - timedelta(days=1), changed_at=now)  # stored just now
    assert ("saga", lost.get().pk) not in runner.orphaned_work(stale_seconds=30)
    lost.update(updated_at=now + timedelta(days=1), changed_at=now - timedelta(minutes=1))
    assert ("saga", lost.get().pk) in runner.orphaned_work(stale_seconds=30)


# ------------------------------------------------------------------ showing the agent's times


def test_the_skew_warning_appears_above_the_threshold_and_not_below(
    world: dict[str, Any], settings: Any
) -> None:
    settings.SAGABOARD_CLOCK_SKEW = 60
    world["send"]("two-minutes-slow", timezone.now() - timedelta(seconds=120))
    world["send"]("half-a-minute-slow", timezone.now() - timedelta(seconds=30))
    client = world["client"]
    page = client.get("/").content.decode()
    slow_row = row_of(page, "two-minutes-slow")
    assert BADGE in slow_row and "2\xa0minutes behind the server" in slow_row
    assert BADGE not in row_of(page, "half-a-minute-slow")
    detail = client.get("/sagas/shop/two-minutes-slow/").content.decode()
    assert BADGE in detail and "The agent reported updated" in detail
    assert "As the agent reported" in detail  # its times are shown either way
    fine = client.get("/sagas/shop/half-a-minute-slow/").content.decode()
    assert BADGE not in fine and "As the agent reported" in fine
    settings.SAGABOARD_CLOCK_SKEW = 10
    assert BADGE in row_of(client.get("/").content.decode(), "half-a-minute-slow")


def test_the_warning_names_both_times_in_text(world: dict[str, Any]) -> None:
    saga = world["send"]("from-9999", FAR_FUTURE)
    page = world["client"].get("/sagas/shop/from-9999/").content.decode()
    assert 'reported updated <span class="when when-bare" data-clock="agent"><time' in page
    assert "9999-01-01 00:00:00 UTC</time>" in page
    assert "ahead of the server" in page
    title = f"the server recorded {saga.changed_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    assert title in page


def row_of(page: str, saga_id: str) -> str:
    start = page.index(saga_id)
    return page[page.rindex("<tr", 0, start) : page.index("</tr>", start)]


def test_the_api_gives_the_servers_times_beside_the_reported_ones(world: dict[str, Any]) -> None:
    saga = world["send"]("from-1970", EPOCH)
    body = world["api_get"]("/sagas/from-1970")
    assert body["created_at"].startswith("1970-01-01") and body["updated_at"].startswith("1970")
    assert datetime.fromisoformat(body["received_at"]) == saga.received_at
    assert datetime.fromisoformat(body["changed_at"]) == saga.changed_at
    assert datetime.fromisoformat(body["steps"][0]["changed_at"]) == saga.changed_at
    summary = world["api_get"]("/sagas")["items"][0]
    assert summary["changed_at"] == body["changed_at"]
    events = world["api_get"]("/sagas/from-1970/events")["items"]
    assert events[0]["at"].startswith("1970")
    assert datetime.fromisoformat(events[-1]["recorded_at"]) == saga.changed_at


def test_the_warning_writes_a_year_1_time_with_four_digits() -> None:
    year_1 = datetime(1, 1, 1, 0, 0, 5, 999999, tzinfo=UTC)
    skew = clock.clock_skew(created_at=year_1, updated_at=None, received_at=FAR_FUTURE,
                            changed_at=None)  # fmt: skip
    assert skew is not None and skew.direction == "behind"
    assert skew.title.startswith(
        "The agent reported created 0001-01-01 00:00:05 UTC; the server recorded "
        "9999-01-01 00:00:00 UTC: 9997\xa0years, 11\xa0months behind the server."
    ), skew.title


# ------------------------------------------------------------------ the live fragment


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_row_pushed_live_carries_the_warning_too() -> None:
    shop, cookie = await database_sync_to_async(_live_world)()
    try:
        after = await database_sync_to_async(visible.last_event_id)()
        comm = WebsocketCommunicator(
            application,
            f"/ws/sagas/?list=1&after={after}",
            headers=[
                (b"origin", b"http://localhost"),
                (b"host", b"localhost"),
                (b"cookie", f"sessionid={cookie}".encode()),
            ],
        )
        connected, _ = await comm.connect()
        assert connected
        token = await database_sync_to_async(lambda: token_create(project=shop, label="a").secret)()
        await database_sync_to_async(post)(Client(), token, agent_run("live-1970", EPOCH))
        for _ in range(20):
            html = await comm.receive_from(timeout=5.0)
            if "live-1970" in html and 'id="saga-' in html:
                break
        assert BADGE in html and "1970-01-01 00:00:00" in html
        await comm.disconnect()
    finally:
        stop_all()


def _live_world() -> tuple[Project, str]:
    shop = Project.objects.create(slug="shop", name="Shop")
    user = get_user_model().objects.create_user("alice", password="pw-alice-123")
    shop.members.add(user)
    roles_sync(Group, Permission)  # transactional tests flush what migrations created
    user.groups.add(Group.objects.get(name="viewer"))
    client = Client()
    client.force_login(user)
    return shop, client.cookies["sessionid"].value


# ------------------------------------------------------------------ migration and setting


def test_the_migration_fills_the_servers_times_from_the_event_log(world: dict[str, Any]) -> None:
    saga = world["send"]("from-1970", EPOCH)
    events = list(Event.objects.filter(saga=saga).order_by("pk"))
    stored = timezone.now() - timedelta(days=30)
    for n, event in enumerate(events):  # stored a day apart, a month ago
        Event.objects.filter(pk=event.pk).update(recorded_at=stored + timedelta(days=n))
    first, last = events[0], events[-1]
    Saga.objects.filter(pk=saga.pk).update(received_at=EPOCH, changed_at=EPOCH)
    Step.objects.filter(saga=saga).update(changed_at=EPOCH)
    migration = importlib.import_module("sagaboard.migrations.0008_server_clock")
    with connection.cursor() as cursor:
        cursor.execute(migration.BACKFILL_SAGAS)
        cursor.execute(migration.BACKFILL_STEPS)
    first.refresh_from_db()
    last.refresh_from_db()
    saga.refresh_from_db()
    assert saga.received_at == first.recorded_at and saga.changed_at == last.recorded_at
    step_events = Event.objects.filter(saga=saga, step_id="step-1").order_by("-pk")
    assert saga.steps.get().changed_at == step_events[0].recorded_at


@pytest.mark.slow  # settings loaded in a subprocess
def test_a_bad_clock_skew_setting_stops_the_start_naming_the_variable() -> None:
    env = {**os.environ, "SAGABOARD_CLOCK_SKEW": "soon"}
    done = subprocess.run(
        [sys.executable, "-c", "import sagaboard.config.settings"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "SAGABOARD_CLOCK_SKEW" in done.stderr


@pytest.mark.parametrize("value", ["-5", "nan", "inf", "1e999", "5 min"])
def test_the_clock_skew_setting_refuses_what_is_not_seconds(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGABOARD_CLOCK_SKEW", value)
    with pytest.raises(ImproperlyConfigured, match="SAGABOARD_CLOCK_SKEW"):
        env_seconds("SAGABOARD_CLOCK_SKEW", 300.0)


@pytest.mark.parametrize(("value", "seconds"), [(" 12.5 ", 12.5), ("", 300.0), ("0", 0.0)])
def test_the_clock_skew_setting_takes_seconds_and_defaults_to_five_minutes(
    value: str, seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGABOARD_CLOCK_SKEW", value)
    assert env_seconds("SAGABOARD_CLOCK_SKEW", 300.0) == seconds

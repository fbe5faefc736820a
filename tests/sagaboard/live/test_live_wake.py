"""The relay is woken by the commit, not the clock: each wake path alone delivers.

Every test sets the relay's poll to an hour, so an event that arrives was brought by a
wake: in-process (a commit on SQLite in the relay's own process), PostgreSQL's NOTIFY
(migration 0021's trigger; any process), Redis pub/sub (SQLite with ``REDIS_URL``; any
process). A transaction that rolls back wakes nobody and shows nothing; a LISTEN
connection killed under the relay is replaced and the relay still delivers.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import psycopg
import pytest
from channels.db import database_sync_to_async
from django.db import connection, transaction

from sagaboard.access.reads.visible import last_event_id
from sagaboard.infra.event_wake import events_committed
from sagaboard.live import wake
from sagaboard.live.relay import relay, stop_all
from tests.sagaboard.live.test_live_cluster import REDIS_SERVER, open_tab
from tests.sagaboard.live.test_live_feed import setup_users
from tests.support.live_feed import feed, received, run_saga
from tests.support.live_server import Server, load_demo, redis_scratch, temp_database

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
AN_HOUR = 3600.0
ARRIVAL_SECONDS = 10.0  # a woken relay delivers in milliseconds; slack for a loaded CI
only_postgres = pytest.mark.skipif(not PG, reason="LISTEN/NOTIFY is PostgreSQL's")


class RolledBack(Exception):
    pass


@pytest.fixture
def slow_poll(settings: Any) -> None:
    settings.SAGABOARD_LIVE_POLL_SECONDS = AN_HOUR


@pytest.fixture
async def world(slow_poll: None) -> AsyncIterator[dict[str, Any]]:
    yield await setup_users()
    stop_all()


async def relay_waiting() -> None:
    """Until this loop's relay has made its first read (so only a wake reads again)."""
    for _ in range(200):
        if relay().last_id is not None and (not PG or await _listening()):
            await asyncio.sleep(0.05)  # into its wait
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the relay never made its first read")


@database_sync_to_async
def _listening() -> list[int]:
    """The pids of this database's live-wake LISTEN connections."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
            "AND datname = current_database()",
            [wake.APPLICATION_NAME],
        )
        return [row[0] for row in cursor.fetchall()]


@database_sync_to_async
def run_saga_rolled_back(project: Any, saga_id: str) -> None:
    try:
        with transaction.atomic():
            run_saga.func(project, saga_id)  # type: ignore[attr-defined]
            raise RolledBack
    except RolledBack:
        pass


class Wakes:
    """Counts the wakes this database sends: the SQLite signal, or NOTIFYs on PostgreSQL."""

    def __init__(self) -> None:
        self.count = 0
        self.conn: psycopg.Connection[Any] | None = None
        if PG:
            params = wake._pg_params(connection)
            self.conn = psycopg.connect(**params, autocommit=True)
            self.conn.execute(f"LISTEN {wake.NOTIFY_CHANNEL}")
        else:
            events_committed.connect(self._heard, dispatch_uid="test.wakes")

    def _heard(self, sender: Any, **kwargs: Any) -> None:
        self.count += 1

    def heard(self, seconds: float) -> int:
        if self.conn is not None:
            self.count += sum(1 for _ in self.conn.notifies(timeout=seconds))
        return self.count

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        events_committed.disconnect(dispatch_uid="test.wakes")


@pytest.fixture
def wakes() -> Iterator[Wakes]:
    found = Wakes()
    yield found
    found.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_commit_wakes_the_relay_although_its_poll_is_an_hour(
    world: dict[str, Any],
) -> None:
    comm = feed(f"list=1&after={await database_sync_to_async(last_event_id)()}", world["cookie"])
    assert (await comm.connect())[0]
    await relay_waiting()
    pk = await run_saga(world["shop"], "woken")
    await received(comm, rf'id="saga-{pk}"', timeout=ARRIVAL_SECONDS)
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_rolled_back_transaction_wakes_nobody_and_shows_nothing(
    world: dict[str, Any], wakes: Wakes
) -> None:
    comm = feed(f"list=1&after={await database_sync_to_async(last_event_id)()}", world["cookie"])
    assert (await comm.connect())[0]
    await relay_waiting()
    await run_saga_rolled_back(world["shop"], "never-was")
    assert await database_sync_to_async(wakes.heard)(0.5) == 0
    assert await comm.receive_nothing(timeout=0.5)
    pk = await run_saga(world["shop"], "was")  # the same path, committed: woken and shown
    assert await database_sync_to_async(wakes.heard)(0.5) >= 1
    html = await received(comm, rf'id="saga-{pk}"', timeout=ARRIVAL_SECONDS)
    assert "never-was" not in html
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
def test_events_inserted_outside_a_transaction_wake_at_once(wakes: Wakes) -> None:
    """Autocommit (no atomic block): the statement was its own commit."""
    from sagaboard.models import Event, Project, Saga

    project = Project.objects.create(slug="auto", name="Auto")
    saga = Saga.objects.get(pk=run_saga.func(project, "auto-1"))  # type: ignore[attr-defined]
    before = wakes.heard(0.5)
    assert not connection.in_atomic_block
    Event.objects.create(
        project=project, saga=saga, client_event_id="by-hand", digest="x", kind="saga.note",
        to_state=saga.status, at=saga.created_at,
    )  # fmt: skip
    assert wakes.heard(0.5) > before


@only_postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_relay_still_delivers_after_its_listen_connection_is_killed(
    world: dict[str, Any],
) -> None:
    comm = feed(f"list=1&after={await database_sync_to_async(last_event_id)()}", world["cookie"])
    assert (await comm.connect())[0]
    await relay_waiting()
    (killed,) = await _listening()
    await _terminate(killed)
    first = await run_saga(world["shop"], "while-reconnecting")  # the re-read after reconnect
    await received(comm, rf'id="saga-{first}"', timeout=ARRIVAL_SECONDS)
    for _ in range(200):  # a new LISTEN connection, not the killed one
        pids = await _listening()
        if pids and killed not in pids:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the relay never listened again")
    await asyncio.sleep(0.1)
    second = await run_saga(world["shop"], "after-reconnect")  # woken by the new one's NOTIFY
    await received(comm, rf'id="saga-{second}"', timeout=ARRIVAL_SECONDS)
    await comm.disconnect()


@database_sync_to_async
def _terminate(pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])


# -- across processes: an event posted to a web process that is not the relay's ------------


@pytest.mark.slow
@pytest.mark.parametrize("layer", [pytest.param("notify", marks=only_postgres), "redis"])
def test_an_event_committed_in_another_process_reaches_the_browser_though_the_poll_is_an_hour(
    layer: str, tmp_path: Any
) -> None:
    """Server A holds the browser (and the relay); the event is POSTed to server B.

    ``notify``: PostgreSQL without Redis (each process its own in-memory layer, so only
    A's relay can reach A's browser, and only NOTIFY can wake it). ``redis``: Redis pub/sub
    (on SQLite B publishes the wake; on PostgreSQL NOTIFY still does it).
    """
    with ExitStack() as stack:
        url = stack.enter_context(temp_database("postgres" if PG else "sqlite", tmp_path))
        token = load_demo(url, token=True)
        redis_url = stack.enter_context(redis_scratch(REDIS_SERVER)) if layer == "redis" else ""
        env = {
            "REDIS_URL": redis_url,
            "SAGABOARD_LIVE_POLL_SECONDS": str(AN_HOUR),
            "SAGABOARD_REDIS_PREFIX": f"wake-{uuid.uuid4().hex[:8]}",
        }
        a, b = Server(url, env=env), Server(url, env=env)
        for server in (a, b):
            stack.callback(server.stop)
            server.start()
        tab = open_tab(stack, a)
        time.sleep(1.0)  # A's relay makes its first read and waits (an hour)
        saga_id = f"wake-{layer}-{uuid.uuid4().hex[:6]}"
        _post_saga(b.url, token, saga_id)
        deadline = time.monotonic() + ARRIVAL_SECONDS
        while not any(saga_id in text for text in tab.texts.values()):
            assert time.monotonic() < deadline, f"{saga_id} never reached the browser on A"
            tab._read(deadline - time.monotonic())


def _post_saga(base: str, token: str, saga_id: str) -> None:
    from benchmarks.live_latency import saga_started

    answer = httpx.post(
        f"{base}/api/v1/events",
        json={"events": [saga_started(saga_id)]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
        trust_env=False,
    )
    answer.raise_for_status()
    assert {r["status"] for r in answer.json()["results"]} == {"applied"}

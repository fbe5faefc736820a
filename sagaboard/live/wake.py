"""What wakes the relay when an event commits, in whichever process it committed.

The relay (``sagaboard.live.relay``) sleeps on an ``asyncio.Event`` between reads of
the event log, for at most its poll interval. Three things set it:

- **In-process** (every database): a commit on SQLite in this process
  (``sagaboard.infra.event_wake.events_committed``) sets the Event of every relay
  of the process, from whatever thread committed.
- **PostgreSQL LISTEN/NOTIFY**: a trigger on the event table NOTIFYs
  ``sagaboard_event`` (migration 0021), delivered at commit and dropped on rollback,
  whoever wrote the row (a web process, a worker, psql). Each relay LISTENs on a
  dedicated autocommit connection outside Django's (an open ``notifies()`` would block
  anything else on it), probes it with ``SELECT 1`` when idle, and on any error
  reconnects, LISTENs again and wakes the relay once, which re-reads the log: a
  notification sent while nobody listened is lost, the events are not.
- **Redis pub/sub** (SQLite with ``REDIS_URL``): the committing process publishes on
  ``<prefix>:live:wake`` from a thread of its own (the commit never waits for
  Redis), and each relay subscribes. On PostgreSQL the NOTIFY already crosses
  processes, so nothing is published.

A wake carries nothing to trust (ids are re-read from the log): a lost one costs a
poll interval, duplicates fold into one read.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import threading
import time
import weakref
from typing import Any, Protocol

from django.conf import settings
from django.db import connections

log = logging.getLogger("sagaboard.live.wake")

NOTIFY_CHANNEL = "sagaboard_event"
"""The channel migration 0021's trigger NOTIFYs on every insert into the event table."""
APPLICATION_NAME = "sagaboard-live-wake"
"""The LISTEN connection's ``application_name`` (how to find it in ``pg_stat_activity``)."""
PROBE_SECONDS = 5.0
"""How long the LISTEN connection may be quiet before a ``SELECT 1`` checks it is alive."""
RETRY_SECONDS = (0.05, 5.0)
"""First and longest pause before reconnecting a listener (doubling in between)."""

_local: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event] = (
    weakref.WeakKeyDictionary()
)


def redis_channel() -> str:
    return f"{settings.SAGABOARD_REDIS_PREFIX}:live:wake"


def register(woken: asyncio.Event) -> None:
    """Let this process's commits set ``woken`` (one per event loop: its relay's)."""
    _local[asyncio.get_running_loop()] = woken


def wake_local() -> None:
    """Set every registered relay's Event, from any thread."""
    try:
        relays = list(_local.items())
    except RuntimeError:  # a relay was registered meanwhile: its first read is at hand
        return
    for loop, woken in relays:
        if not loop.is_closed():
            loop.call_soon_threadsafe(woken.set)


def on_events_committed(sender: Any, **kwargs: Any) -> None:
    """``events_committed`` receiver: wake this process's relays, and the others' via Redis."""
    wake_local()
    if settings.REDIS_URL:
        _publisher.poke()


class _Publisher:
    """Publishes wakes to Redis from a thread of its own, folding those that pile up."""

    def __init__(self) -> None:
        self.wanted = threading.Event()
        self.thread: threading.Thread | None = None
        self.pid = 0
        self.lock = threading.Lock()

    def poke(self) -> None:
        self.wanted.set()
        if self.thread is None or self.pid != os.getpid() or not self.thread.is_alive():
            with self.lock:  # started on first use, and again in a forked child
                if self.thread is None or self.pid != os.getpid() or not self.thread.is_alive():
                    self.pid = os.getpid()
                    self.thread = threading.Thread(
                        target=self._run, name="sagaboard-live-wake", daemon=True
                    )
                    self.thread.start()

                    atexit.register(self.flush)

    def _run(self) -> None:
        client = _redis_client()
        while True:
            self.wanted.wait()
            self.wanted.clear()
            try:
                client.publish(redis_channel(), b"")
            except Exception:  # Redis blinked: the relays' poll covers what this missed
                log.warning("could not publish a live wake to Redis", exc_info=True)
                time.sleep(1.0)

    def flush(self) -> None:
        """At exit: a command that commits and ends must not leave its wake unsent."""
        if self.wanted.is_set() and self.pid == os.getpid():
            with contextlib.suppress(Exception):
                _redis_client().publish(redis_channel(), b"")


def _redis_client() -> Any:
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


_publisher = _Publisher()


class Listener(Protocol):
    """Sets a relay's Event on every wake from other processes, for ever (``run``)."""

    async def run(self) -> None: ...
    def close(self) -> None: ...


def listeners(woken: asyncio.Event) -> list[Listener]:
    """The cross-process listeners a relay needs on this database and channel layer."""
    db = connections["default"]
    if db.vendor == "postgresql":
        return [PostgresListener(woken, _pg_params(db))]
    if settings.REDIS_URL:
        return [RedisListener(woken, settings.REDIS_URL, redis_channel())]
    return []


def _pg_params(db: Any) -> dict[str, Any]:
    params = dict(db.get_connection_params())
    for key in ("cursor_factory", "context"):  # Django's sync cursor and adapters
        params.pop(key, None)
    params.setdefault("application_name", APPLICATION_NAME)
    return params


class PostgresListener:
    """LISTEN on a connection of its own, reconnecting after any error."""

    def __init__(
        self, woken: asyncio.Event, params: dict[str, Any], channel: str = NOTIFY_CHANNEL
    ) -> None:
        self.woken, self.params, self.channel = woken, params, channel
        self.conn: Any = None

    async def run(self) -> None:
        import psycopg
        from psycopg import sql

        pause = RETRY_SECONDS[0]
        while True:
            try:
                self.conn = await psycopg.AsyncConnection.connect(**self.params, autocommit=True)
                async with self.conn as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    self.woken.set()  # re-read: whatever committed while nobody listened
                    pause = RETRY_SECONDS[0]
                    while True:
                        async for _ in conn.notifies(timeout=PROBE_SECONDS):
                            self.woken.set()
                        await conn.execute("SELECT 1")  # quiet: is the connection still there?
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("live wake: LISTEN connection lost (%s); reconnecting", err)
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_SECONDS[1])

    def close(self) -> None:
        """Hang up now, from outside the loop too (a test's loop may end before the task)."""
        if self.conn is not None:
            self.conn.pgconn.finish()


class RedisListener:
    """Subscribe to the wake channel, resubscribing after any error."""

    def __init__(self, woken: asyncio.Event, url: str, channel: str) -> None:
        self.woken, self.url, self.channel = woken, url, channel

    async def run(self) -> None:
        import redis.asyncio as aioredis

        pause = RETRY_SECONDS[0]
        while True:
            client = aioredis.from_url(self.url, health_check_interval=PROBE_SECONDS)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel)
                    self.woken.set()  # re-read: whatever committed while nobody listened
                    pause = RETRY_SECONDS[0]
                    while True:
                        message = await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=PROBE_SECONDS
                        )
                        if message is not None:
                            self.woken.set()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("live wake: Redis subscription lost (%s); resubscribing", err)
            finally:
                await client.aclose()
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_SECONDS[1])

    def close(self) -> None:
        return None  # the cancelled task closes its client

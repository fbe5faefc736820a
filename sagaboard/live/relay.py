"""Live updates: the event log is the outbox; a relay reads it and fans events out to browsers.

An ``Event`` row is committed in the same transaction as the change it
describes, so a change that was rolled back is never shown, and any process
that writes (an API request, a worker, a management command) is seen without
a broker: the relay reads the log for ids above the last it relayed and sends
them to the group of the event's project. It reads when a commit wakes it
(``sagaboard.live.wake``: PostgreSQL's NOTIFY from a trigger on the event table,
Redis pub/sub on SQLite with ``REDIS_URL``, or the committing thread of its own
process), whichever process committed, and at least every
``SAGABOARD_LIVE_POLL_SECONDS`` (250 ms), the safety net for a lost wake or a writer
that sends none (SQL by hand; on SQLite without Redis, a worker). The wake carries
nothing: the ids come from the log, so a lost wake costs latency, never an event,
and wakes that pile up during a read fold into the next one. Messages carry ids only; consumers
render for their own user. Each message also carries the id of the previous
event of that project it relayed, so a consumer that missed one (the
in-memory channel layer drops messages when a buffer fills) notices the gap
and catches up from the log. A gap is only noticed when a later message
arrives, so the relay also repeats each recently active project's newest id
every ``TAIL_SECONDS`` (a "tail"): the last messages of a burst, dropped with
nothing after them, are refilled too.

Where the relay runs:

- Embedded default (no ``REDIS_URL``): each web process relays for its own
  browsers, through the in-process channel layer.
- Production (``REDIS_URL``): one web process at a time holds a lease in Redis
  and publishes through channels_redis to every web process; the others stand
  by and take over when the lease lapses (the cursor is kept in Redis too).
  One poller for the whole cluster, whatever the number of web processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
import weakref
from collections.abc import Callable, Collection
from typing import Any, Protocol

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db.models import Max, Q

from sagaboard.live import wake
from sagaboard.models import Event

log = logging.getLogger("sagaboard.live.relay")

BATCH = 500
GAP_SECONDS = 30.0
"""How long an id skipped by the cursor may still show up (an open transaction)."""
MAX_GAP_RANGES = 200
TAIL_SECONDS = 1.0
"""How often the newest id of each recently active project is repeated (see above)."""
TAIL_FOR_SECONDS = 60.0
"""How long after its last event a project's newest id is still repeated."""


def project_group(project_pk: int) -> str:
    return f"project.{project_pk}"


@database_sync_to_async
def _last_event_id() -> int:
    return int(Event.objects.aggregate(top=Max("pk"))["top"] or 0)


@database_sync_to_async
def _events_after(log_id: int, gaps: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Events above the cursor, and any that filled a gap below it (committed late)."""
    found = Q(pk__gt=log_id)
    for low, high in gaps:
        found |= Q(pk__gte=low, pk__lte=high)
    return list(
        Event.objects.filter(found)
        .order_by("pk")
        .values_list("pk", "project_id", "saga_id")[:BATCH]
    )


class Gaps:
    """Ids skipped by the cursor that may still commit (PostgreSQL assigns ids at insert).

    A transaction that took ids 74-94 and commits after event 95 was relayed would
    be invisible to "id > cursor" for ever. Every id the cursor jumps over is kept
    here, as ranges, for ``GAP_SECONDS``: each poll also reads those ranges, and an
    id that shows up is relayed then. Ids that never show up belonged to rolled-back
    transactions and are dropped when they expire.
    """

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int, float]] = []

    def add(self, low: int, high: int) -> None:
        if low <= high:
            self.ranges.append((low, high, time.monotonic() + GAP_SECONDS))
            del self.ranges[:-MAX_GAP_RANGES]

    def found(self, log_id: int) -> None:
        """``log_id`` was relayed: split the range it was in."""
        kept = []
        for low, high, until in self.ranges:
            if low <= log_id <= high:
                kept += [(lo, hi, until) for lo, hi in ((low, log_id - 1), (log_id + 1, high))
                         if lo <= hi]  # fmt: skip
            else:
                kept.append((low, high, until))
        self.ranges = kept

    def current(self) -> list[tuple[int, int]]:
        now = time.monotonic()
        self.ranges = [r for r in self.ranges if r[2] > now]
        return [(low, high) for low, high, _ in self.ranges]


class Leadership(Protocol):
    """Who may relay: every process (embedded) or the lease holder (Redis)."""

    async def hold(self) -> bool: ...
    async def cursor(self) -> int | None: ...
    async def save_cursor(self, log_id: int) -> None: ...


class AlwaysLead:
    """One web process, in-process channel layer: this relay serves its own browsers."""

    async def hold(self) -> bool:
        return True

    async def cursor(self) -> int | None:
        return None

    async def save_cursor(self, log_id: int) -> None:
        return None


# Take the lease if it is free or already ours, and extend it; atomically.
_TAKE_OR_RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""


class RedisLease:
    """A lease in Redis: the holder relays for the cluster, renewed at a third of its life."""

    def __init__(self, url: str, prefix: str = "sagaboard", ttl_seconds: float = 3.0) -> None:
        import redis.asyncio as aioredis

        self.KEY, self.CURSOR = f"{prefix}:relay:leader", f"{prefix}:relay:cursor"
        self.redis = aioredis.from_url(url)
        self.token = uuid.uuid4().hex
        self.ttl = ttl_seconds
        self.renewed = 0.0
        self.leading = False

    async def hold(self) -> bool:
        now = time.monotonic()
        if self.leading and now - self.renewed < self.ttl / 3:
            return True
        won = await self.redis.eval(  # type: ignore[misc]
            _TAKE_OR_RENEW, 1, self.KEY, self.token, int(self.ttl * 1000)
        )
        self.leading = bool(won)
        if self.leading:
            self.renewed = now
        return self.leading

    async def cursor(self) -> int | None:
        raw = await self.redis.get(self.CURSOR)
        return int(raw) if raw is not None else None

    async def save_cursor(self, log_id: int) -> None:
        # Kept an hour: a cluster down longer than that starts from the log's end (pages
        # rendered since then carry their own cursor and catch up themselves).
        await self.redis.set(self.CURSOR, log_id, ex=3600)


class Relay:
    """Polls the event log and fans new events out to project groups (one per event loop)."""

    def __init__(self, poll_seconds: float, leadership: Leadership) -> None:
        self.poll_seconds = poll_seconds
        self.leadership = leadership
        self.start_after: int | None = None
        self.last_id: int | None = None
        self.last_per_project: dict[int, int] = {}
        self.active: dict[int, float] = {}  # project -> when its last event was relayed
        self.tail_due = 0.0
        self.gaps = Gaps()
        self.woken = asyncio.Event()
        """Set by a commit (``sagaboard.live.wake``): read the log now, not at the poll."""
        self.task: asyncio.Task[None] | None = None
        self.degraded = False
        """Its last read of the log or send to the channel layer failed: browsers are told
        their updates are delayed (``live_state``) until a read and its sends succeed."""
        self.listeners: list[wake.Listener] | None = None
        self.listening: list[asyncio.Task[None]] = []

    def ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self.task is None or self.task.done():
            self.task = loop.create_task(self._run())
        if self.listeners is None:
            wake.register(self.woken)
            self.listeners = wake.listeners(self.woken)
            self.listening = [loop.create_task(one.run()) for one in self.listeners]

    def stop(self) -> None:
        for task in [self.task, *self.listening]:
            if task is not None:
                task.cancel()
        for one in self.listeners or ():
            one.close()

    async def _run(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception:  # the database or Redis blinked: keep the relay alive, retry
                log.exception("event relay could not read the log or reach the channel layer")
                self.last_id = None  # re-read the shared cursor: another relay may have led
                await self._tell_sockets(degraded=True)
                await asyncio.sleep(1.0)
            else:
                await self._tell_sockets(degraded=False)

    async def _tell_sockets(self, *, degraded: bool) -> None:
        """On a change of health only: this process's open sockets, directly (the channel
        layer may be what failed). Once healthy again, each socket's gap check refills
        what it missed from the log (the relay restarts with no ``prev`` to vouch for)."""
        if degraded == self.degraded:
            return
        self.degraded = degraded
        checks = _rechecks.get(asyncio.get_running_loop())
        for socket in list(checks.sockets) if checks is not None else []:
            with contextlib.suppress(Exception):  # a socket closing meanwhile
                await socket.live_state(degraded)

    async def _step(self) -> None:
        if not await self.leadership.hold():
            self.last_id, self.last_per_project, self.active = None, {}, {}
            await asyncio.sleep(1.0)  # standing by: try for the lease again soon
            return
        if self.last_id is None:
            shared = await self.leadership.cursor()
            newest = await _last_event_id()
            if shared is not None and shared <= newest:
                self.last_id = shared
            elif shared is not None:  # a cursor from another database (left over, restored)
                log.warning(
                    "relay cursor %s is past the log's end %s: starting there", shared, newest
                )
                self.last_id = newest
            elif self.start_after is not None:
                self.last_id = self.start_after
            else:
                self.last_id = await _last_event_id()
        self.woken.clear()  # before the read: a commit from here on wakes the next one
        rows = await _events_after(self.last_id, self.gaps.current())
        layer = get_channel_layer()
        assert layer is not None, "CHANNEL_LAYERS is not configured"
        for log_id, project_pk, saga_pk in rows:
            if log_id <= self.last_id:
                self.gaps.found(log_id)  # committed late, below the cursor
            else:
                self.gaps.add(self.last_id + 1, log_id - 1)
            await layer.group_send(
                project_group(project_pk),
                {
                    "type": "saga.event",
                    "project": project_pk,
                    "log_id": log_id,
                    "prev": self.last_per_project.get(project_pk),
                    "saga_pk": saga_pk,
                },
            )
            self.last_per_project[project_pk] = max(
                log_id, self.last_per_project.get(project_pk, 0)
            )
            self.active[project_pk] = time.monotonic()
            self.last_id = max(log_id, self.last_id)
        if rows:
            await self.leadership.save_cursor(self.last_id)
        await self._send_tails()
        if len(rows) < BATCH:
            await self._wait()

    async def _wait(self) -> None:
        """Until a commit wakes the relay, or the poll interval (the safety net) ends."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.woken.wait(), self.poll_seconds)

    async def _send_tails(self) -> None:
        """Every ``TAIL_SECONDS``: each recently active project's newest relayed id."""
        now = time.monotonic()
        if now < self.tail_due:
            return
        self.tail_due = now + TAIL_SECONDS
        self.active = {p: at for p, at in self.active.items() if now - at < TAIL_FOR_SECONDS}
        layer = get_channel_layer()
        assert layer is not None, "CHANNEL_LAYERS is not configured"
        for project_pk in self.active:
            await layer.group_send(
                project_group(project_pk),
                {"type": "saga.tail", "project": project_pk,
                 "log_id": self.last_per_project[project_pk]},
            )  # fmt: skip


_relays: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Relay] = weakref.WeakKeyDictionary()


def _leadership() -> Leadership:
    url = getattr(settings, "REDIS_URL", "")
    return RedisLease(url, settings.SAGABOARD_REDIS_PREFIX) if url else AlwaysLead()


def relay(start_after: int | None = None) -> Relay:
    """This event loop's relay, started on first use.

    The first browser's ``after`` (the newest event its page was rendered with)
    is where a new relay starts when no shared cursor exists, so nothing
    committed between that render and the relay's first poll is skipped.
    """
    loop = asyncio.get_running_loop()
    found = _relays.get(loop)
    if found is None:
        found = _relays[loop] = Relay(settings.SAGABOARD_LIVE_POLL_SECONDS, _leadership())
        found.start_after = start_after
    found.ensure_running()
    return found


class Rechecked(Protocol):
    """An open socket whose session is checked again every ``SAGABOARD_LIVE_RECHECK_SECONDS``."""

    session_key: str

    async def apply_access(self, access: Any) -> None: ...
    async def live_state(self, degraded: bool) -> None: ...


class Recheck:
    """The periodic re-check of one event loop's open sockets (the revocation backstop).

    Pushed revocations (``sagaboard.live.access``) reach sockets at once for changes
    the app makes; this catches the rest (a session deleted in the database, an
    expiry, SQL by hand) within the interval. One thread hop and one check per
    distinct session per interval, however many sockets share it, and nothing at
    all per relayed message: 200 browsers on one list add no query to an event.
    """

    def __init__(self, check: Callable[[Collection[str]], dict[str, Any]]) -> None:
        # On a thread of its own, not the one every render and relay poll queues on:
        # checking thousands of sessions must not hold up a live update.
        self.check = database_sync_to_async(check, thread_sensitive=False)
        self.sockets: weakref.WeakSet[Rechecked] = weakref.WeakSet()
        self.task: asyncio.Task[None] | None = None

    def add(self, socket: Rechecked) -> None:
        self.sockets.add(socket)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def discard(self, socket: Rechecked) -> None:
        self.sockets.discard(socket)

    async def _run(self) -> None:
        while self.sockets:
            await asyncio.sleep(float(settings.SAGABOARD_LIVE_RECHECK_SECONDS))
            try:
                await self.once()
            except asyncio.CancelledError:
                raise
            except Exception:  # the database blinked: keep checking, next time
                log.exception("the live feed's periodic access re-check failed")

    async def once(self) -> None:
        sockets = list(self.sockets)
        if not sockets:
            return
        accesses = await self.check({s.session_key for s in sockets})
        for socket in sockets:
            await socket.apply_access(accesses[socket.session_key])


_rechecks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Recheck] = (
    weakref.WeakKeyDictionary()
)


def recheck(check: Callable[[Collection[str]], dict[str, Any]]) -> Recheck:
    """This event loop's periodic re-check (``check`` maps session keys to their access)."""
    loop = asyncio.get_running_loop()
    found = _rechecks.get(loop)
    if found is None:
        found = _rechecks[loop] = Recheck(check)
    return found


def stop_all() -> None:
    """Cancel every relay and re-check task (for tests that end their event loop)."""
    for r in list(_relays.values()):
        r.stop()
    _relays.clear()
    for c in list(_rechecks.values()):
        if c.task is not None:
            c.task.cancel()
    _rechecks.clear()

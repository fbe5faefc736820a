"""``SagaboardStore``: mirror every transition of local sagas to sagaboard, in the background.

The agent's work must never fail because the dashboard is slow or down, so
``apply`` only serialises the change (in the caller's thread: a value that is
not JSON fails *that* step, as with ``SQLiteStore``) and queues it; one daemon
thread sends the queue in batches.

Guarantees:

* **Order.** One FIFO queue for the whole store. The sender always sends the
  head of the queue and removes events only once acknowledged, so events reach
  the server in ``apply`` order, across sagas too, and are never reordered.
  A retried batch starts at the same event (it may have grown meanwhile).
* **At least once.** A batch whose answer was lost is sent again; the server
  recognises each ``event_id`` (``"<saga id>:<seq>"``) and answers
  ``duplicate``, so nothing is applied twice.
* **Retries.** Connection errors, timeouts, 408, 429 and 5xx are retried with
  exponential backoff and jitter up to ``max_backoff``; ``Retry-After`` is
  honoured. 401/403/404/405 (a bad token or URL) are retried too, loudly: they
  are a configuration problem, and dropping events for it would lose all of them.
* **Bad values fail where they enter.** ``apply`` encodes the event with
  undo_core's one rule for stored values (``undo_core.stores.serialize``: JSON, text
  that encodes as UTF-8, e.g. no lone surrogate from ``os.fsdecode``, engine
  counters within 64 bits) and raises :class:`~undo_core.SerializationError`
  naming the saga, step and field, in the caller's thread, so the engine fails
  that step by its rules. The event is never queued; it is logged and reported
  once per saga to ``on_error``. Nothing behind it waits.
* **No event blocks the others.** Any other 4xx than those below means an event
  in the batch is refused. The sender isolates it (the part before the server's
  ``index`` as one batch, then the suspect alone; without an index, one by one),
  logs it on the ``undo_core.remote`` logger with its saga id, event id and the
  reason, calls ``on_error(event, error)`` and drops it. The *later* events of
  that saga are dropped too, unsent (counted, logged once): the server would
  refuse them as moves from a state it never saw, or worse accept some and show
  a saga that never was. What sagaboard shows of that saga is then a true
  prefix of its history, and the ``on_error`` call says why it stops there. An
  event found unsendable in the queue itself (a spool row that is not UTF-8) is
  handled the same way, and so is one the sender fails on three times in a
  row for a reason it does not know (a bug): it is tried alone first, then
  reported and dropped, so nothing can wedge the queue.
* **Bounded memory.** Without a spool at most ``max_queue`` events wait in
  memory. When full, ``apply`` blocks up to ``block_timeout`` seconds (back
  pressure for a slow server) and then raises ``StoreError("sagaboard queue
  full ...")``: an event is never dropped silently, and the engine treats the
  error as a failed write (the step fails, or the saga rolls back). To never
  block and never fail, give a ``spool``.
* **Spool.** With ``spool=path`` every event is written to a local SQLite file
  before ``apply`` returns and deleted once acknowledged; memory holds only the
  batch in flight. A process that exits or is killed leaves its events there,
  and the next store on the same file sends them first, in order.
* **flush and close.** ``flush()`` is ``True`` once every event queued before it
  is *settled*: acknowledged, or refused/unsendable and reported to ``on_error``
  (``True`` does not mean all were accepted: ``stats()`` counts the drops).
  ``close()`` flushes (bounded by its timeout), then stops; what is still
  queued stays in the spool, or, without one, is lost *loudly*: a warning, and
  ``on_error`` once per event with a :class:`~undo_core.StoreError` saying so.

``on_error(event, error)`` gets the event (a dict in the wire format) and why it
will never reach sagaboard: a :class:`SagaboardAPIError` for a refusal (``status``,
``code``, ``field``, ``message``, the raw ``response``), a
:class:`~undo_core.SerializationError` for a value that cannot be encoded, a
:class:`~undo_core.StoreError` otherwise. It runs in the sender thread (in the
thread calling ``close()`` for what close could not send); an exception it raises
is logged and ignored.

**Rollbacks people ask for.** sagaboard's answer to a batch lists the pending
rollback requests of the sagas in it (``rollback_requested``), and while the
queue is idle (a long step) the sender asks for them every ``rollback_poll``
seconds (``None``: never) as long as a saga it mirrors is IN_PROGRESS. What it
hears is kept in memory; the engine asks :meth:`SagaboardStore.rollback_requested`
at each step boundary, rolls the saga back and raises
:class:`~undo_core.RollbackRequestedError`. sagaboard sees the saga go
COMPENSATING and marks the request carried out.

Leases: the server keeps no leases for mirrored sagas, so ``acquire_lease`` /
``release_lease`` work in this process only (a dict under a lock, with
MemoryStore's compare-and-set). To recover a saga after its process died, keep
a local :class:`~undo_core.SQLiteStore` as the saga's store as well (recover
from it), and use this store as the mirror.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self

import httpx

from ..stores.serialize import value_problem
from ..stores.storage import RollbackRequest, SagaChange
from ..vocabulary.errors import LeaseError, SerializationError, StoreError
from ..vocabulary.records import SagaRecord, SagaSnapshot
from ..vocabulary.states import SagaStatus
from ._client import SagaboardClient, retry_after
from ._errors import SagaboardAPIError, api_error
from ._queue import Item, MemoryQueue, Outbox, SpoolQueue
from ._wire import change_to_event, encode_event, event_id, saga_from_json

__all__ = ["ErrorHook", "SagaboardStore"]

log = logging.getLogger("undo_core.remote")

ErrorHook = Callable[[dict[str, Any], StoreError], None]
"""``on_error(event, error)``: called once for each event sagaboard will never get (module doc)."""

_EVENTS_PATH = "/api/v1/events"
_REQUESTS_PATH = "/api/v1/rollback-requests"
_MAX_BATCH_BYTES = 900_000  # under the server's default SAGABOARD_API_MAX_BODY (1 MiB)
_BASE_BACKOFF = 0.1
_MAX_RETRY_AFTER = 300.0
_IDLE_WAIT = 1.0  # the sender and flush() re-check their state at least this often
_CONFIG_STATUSES = frozenset({401, 403, 404, 405})
_SUSPECT_TRIES = 3  # unexplained sender failures on one head event before it is dropped
_EVENT_ID_AT = len('{"event_id":')  # every payload starts so (change_to_event's first key)
_DECODER = json.JSONDecoder()


class _Lease(NamedTuple):
    owner: str | None
    expires_at: datetime | None
    seq: int


class _Report(NamedTuple):
    """An event sagaboard will never get, and why: for ``on_error``."""

    event: dict[str, Any]
    error: StoreError


class _Answer(NamedTuple):
    """What the server's answer to one batch means for the sender."""

    kind: str  # "ok" | "retry" | "bad"
    response: httpx.Response | None = None
    retry_after: float = 0.0


class SagaboardStore:
    """A :class:`~undo_core.SagaStore` that reports every transition to sagaboard.

    ``Saga("checkout", store=SagaboardStore(url, token))``. Use it as a (sync or
    async) context manager, or call :meth:`close`, so queued events are sent
    before the process ends; an open store also flushes at interpreter exit.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        batch_size: int = 200,
        flush_interval: float = 0.05,
        max_queue: int = 10_000,
        spool: str | Path | None = None,
        timeout: float = 5.0,
        max_backoff: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        on_error: ErrorHook | None = None,
        block_timeout: float = 2.0,
        rollback_poll: float | None = 2.0,
    ) -> None:
        if batch_size < 1 or max_queue < 1:
            raise ValueError("batch_size and max_queue must be at least 1")
        self.url = url.rstrip("/")
        self._batch_size = batch_size
        self._flush_interval = max(0.0, flush_interval)
        self._timeout = timeout
        self._max_backoff = max(0.0, max_backoff)
        self._block_timeout = max(0.0, block_timeout)
        self._on_error = on_error
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )
        self._reader = SagaboardClient(url, token, timeout=timeout, transport=transport)
        self._spooled = spool is not None
        self._queue: Outbox = SpoolQueue(spool) if spool is not None else MemoryQueue(max_queue)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._hurry = threading.Event()
        self._stopping = False
        self._closed = False
        self._flushing = 0
        self._outage = False
        self._leases: dict[str, _Lease] = {}
        self._rollback_requests: dict[str, RollbackRequest] = {}
        self._running: set[str] = set()  # sagas IN_PROGRESS here: asked about while idle
        self._rollback_poll = rollback_poll
        self._last_heard = time.monotonic()
        self._counts = {
            "sent": 0,
            "retried": 0,
            "dropped_bad": 0,
            "unencodable": 0,
            "dropped_after_refusal": 0,
            "dropped_failing": 0,
            "lost": 0,
            "spooled": 0,
        }
        self._reports: list[_Report] = []  # from apply(), for the sender to hand to on_error
        self._reports_made = 0
        self._reports_done = 0
        self._reported_sagas: set[str] = set()  # unencodable writes: on_error once per saga
        self._refused_sagas: set[str] = set()  # their later events are not sent (sender only)
        self._suspect: list[int] | None = None  # [head number, unexplained failures]
        self._thread = threading.Thread(target=self._run, name="sagaboard-sender", daemon=True)
        self._thread.start()
        _open_stores.add(self)

    def __repr__(self) -> str:
        return f"<SagaboardStore {self.url} queued={len(self._queue)}>"

    # ------------------------------------------------------------ SagaStore: writes

    def apply(self, change: SagaChange) -> None:
        """Queue one transition; never waits for the network (a full queue: see the module doc)."""
        try:
            payload = encode_event(change)  # SerializationError here, in the caller's thread
        except SerializationError as err:
            self._unencodable(change, err)
            raise
        with self._cond:
            self._wait_for_room()
            self._fence(change.saga)
            self._queue.put(payload)
            if self._spooled:
                self._counts["spooled"] += 1
            r = change.saga
            self._leases[r.id] = _Lease(r.lease_owner, r.lease_expires_at, r.seq)
            if r.status is SagaStatus.IN_PROGRESS:
                self._running.add(r.id)
            else:
                self._running.discard(r.id)
                self._rollback_requests.pop(r.id, None)
            waiting = len(self._queue)
            if waiting == 1 or waiting >= self._batch_size:
                self._cond.notify_all()  # the sender is idle, or its batch is full

    def _unencodable(self, change: SagaChange, err: SerializationError) -> None:
        """Log a write that cannot be sent; report it to on_error once per saga."""
        saga_id = change.saga.id
        with self._cond:
            self._counts["unencodable"] += 1
            first = saga_id not in self._reported_sagas
            self._reported_sagas.add(saga_id)
            if first and self._on_error is not None:
                try:
                    event = change_to_event(change)
                except Exception:  # a time that cannot be converted: the id still says which
                    event = {"event_id": event_id(change)}
                self._reports.append(_Report(event, err))
                self._reports_made += 1
                self._cond.notify_all()
        log.log(
            logging.ERROR if first else logging.WARNING,
            "event %r of saga %r is not sent to sagaboard: %s",
            event_id(change),
            saga_id,
            err,
        )

    def _wait_for_room(self) -> None:
        """Back pressure: wait (bounded) for the sender to free room, else refuse the write."""
        deadline = time.monotonic() + self._block_timeout
        while True:
            self._check_open()
            if not self._queue.full():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreError(
                    f"sagaboard queue full: {len(self._queue)} event(s) wait for {self.url}, "
                    f"which is slow or down (waited {self._block_timeout:g}s; "
                    "pass spool= to queue on disk instead)"
                )
            self._cond.wait(left)

    def _fence(self, incoming: SagaRecord) -> None:
        """Refuse a write from an owner that lost the saga's (in-process) lease."""
        held = self._leases.get(incoming.id)
        if held is None:
            return
        if held.owner not in (None, incoming.lease_owner) or incoming.seq <= held.seq:
            raise LeaseError(
                f"saga {incoming.id!r} is leased by {held.owner!r}, or was changed since this "
                f"owner ({incoming.lease_owner!r}) read it"
            )

    def acquire_lease(
        self, saga_id: str, owner: str, expires_at: datetime, *, expected_owner: str | None
    ) -> bool:
        """Compare-and-set in this process; a saga with no local lease counts as unowned."""
        with self._cond:
            held = self._leases.get(saga_id)
            current = held.owner if held is not None else None
            if current not in (expected_owner, owner):
                return False
            self._leases[saga_id] = _Lease(owner, expires_at, held.seq if held else 0)
            return True

    def release_lease(self, saga_id: str, owner: str) -> None:
        """Drop the local lease (and forget the saga: a resting saga needs no fencing)."""
        with self._cond:
            held = self._leases.get(saga_id)
            if held is not None and held.owner == owner:
                del self._leases[saga_id]

    # ------------------------------------------------------------ SagaStore: reads

    def load(self, saga_id: str) -> SagaSnapshot | None:
        """The saga as sagaboard has it, after sending what is queued (``None`` if unknown)."""
        self._check_open()
        if not self.flush(self._timeout):
            raise StoreError(
                f"cannot read saga {saga_id!r} from sagaboard: {len(self._queue)} events "
                f"are still waiting to be sent to {self.url}"
            )
        try:
            data = self._reader.get_saga(saga_id)
        except SagaboardAPIError as err:
            if err.status == 404:
                return None
            raise
        snapshot = saga_from_json(data)
        with self._cond:
            held = self._leases.get(saga_id)
        if held is None:
            return snapshot
        record = snapshot.record._replace(lease_owner=held.owner, lease_expires_at=held.expires_at)
        return SagaSnapshot(record=record, steps=snapshot.steps)

    def list_unfinished(self) -> list[str]:
        """Ids of the project's sagas IN_PROGRESS or COMPENSATING on the server, oldest first.

        These include sagas of other agents of the project: recover from a local
        store instead (see the module doc).
        """
        self._check_open()
        self.flush(self._timeout)
        items = list(self._reader.list_sagas(status=["IN_PROGRESS", "COMPENSATING"]))
        items.sort(key=lambda item: datetime.fromisoformat(item["created_at"]))
        return [item["id"] for item in items]

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"SagaboardStore for {self.url} is closed")

    # ------------------------------------------------------------ flush, close, stats

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event queued so far is settled, and ``on_error`` has heard of it.

        Settled: acknowledged by sagaboard, or refused / unsendable and reported
        to ``on_error`` (so ``True`` does not mean every event was accepted: see
        ``stats()``). ``False`` if ``timeout`` seconds passed first (the events
        stay queued). Cuts the sender's current backoff short, not a server's
        ``Retry-After``.
        """
        if threading.current_thread() is self._thread:
            return False  # called from on_error: waiting on ourselves would deadlock
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target, reports = self._queue.last(), self._reports_made
            self._flushing += 1
            self._cond.notify_all()
            self._hurry.set()
            try:
                return self._wait_through(target, reports, deadline)
            finally:
                self._flushing -= 1

    def _wait_through(self, target: int, reports: int, deadline: float | None) -> bool:
        while (
            (head := self._queue.head()) is not None and head <= target
        ) or self._reports_done < reports:
            if not self._thread.is_alive():
                return False
            left = _IDLE_WAIT if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            self._cond.wait(min(left, _IDLE_WAIT))
        return True

    def close(self, timeout: float | None = 10.0) -> bool:
        """Flush (up to ``timeout`` seconds), then stop the sender; ``True`` if all was settled.

        Events still unsent stay in the spool if there is one (the next store on
        it sends them). Without a spool they are lost, never silently: a warning
        names how many, and ``on_error`` hears of each (in this thread).
        """
        with self._cond:
            if self._closed:
                return len(self._queue) == 0
        sent_all = self.flush(timeout)
        with self._cond:
            self._closed = self._stopping = True
            self._cond.notify_all()
        self._stop.set()
        self._hurry.set()
        self._thread.join(self._timeout + 1.0)  # a request in flight ends within its timeout
        self._shut(sent_all)
        return sent_all

    def _shut(self, sent_all: bool) -> None:
        with self._cond:
            left = len(self._queue)
            lost = [] if self._spooled or not left else self._queue.peek(left, 1 << 62)
            reports, self._reports = self._reports, []
            self._reports_done += len(reports)
            self._counts["lost"] += len(lost)
            self._queue.close()
        self._http.close()
        self._reader.close()
        _open_stores.discard(self)
        if left and self._spooled:
            log.warning("%d event(s) for %s kept in the spool, to send later", left, self.url)
        elif left:
            log.warning(
                "%d event(s) for %s were never sent (no spool), from %s to %s",
                left,
                self.url,
                _event_of(lost[0].payload).get("event_id"),
                _event_of(lost[-1].payload).get("event_id"),
            )
        elif not sent_all:
            log.warning("SagaboardStore for %s closed before its flush ended", self.url)
        why = StoreError(f"not sent: the store for {self.url} closed before it could be")
        self._tell([*reports, *(_Report(_event_of(i.payload), why) for i in lost)])

    def stats(self) -> dict[str, int]:
        """Counts: ``queued`` (waiting now), ``sent``, ``retried`` (batch retries),
        ``dropped_bad`` (events sagaboard refused), ``unencodable`` (writes that could not be
        encoded, and spool rows that were not UTF-8), ``dropped_after_refusal`` (later events
        of those sagas, not sent), ``dropped_failing`` (events the sender kept failing on),
        ``lost`` (queued without a spool when the store closed), ``spooled`` (written to the
        spool by this store)."""
        with self._cond:
            return {"queued": len(self._queue), **self._counts}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    async def aflush(self, timeout: float | None = None) -> bool:
        """:meth:`flush` without blocking the event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    async def aclose(self, timeout: float | None = 10.0) -> bool:
        """:meth:`close` without blocking the event loop."""
        return await asyncio.to_thread(self.close, timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------ the sender thread

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            try:
                self._deliver(batch, grow=True)
                self._suspect = None
            except Exception as err:  # the sender must outlive any bug: events would stop flowing
                log.exception("sagaboard sender failed; retrying")
                self._after_failure(err)
                self._pause(self._max_backoff, 0.0)

    def _after_failure(self, err: Exception) -> None:
        """Retry the head alone; drop it (reported) once it alone failed ``_SUSPECT_TRIES`` times.

        An unexplained failure is a bug, but it must not stop every event behind
        the one that triggers it.
        """
        try:
            with self._cond:
                head = self._queue.head()
                if head is None:
                    return
                if self._suspect is None or self._suspect[0] != head:
                    self._suspect = [head, 0]
                self._suspect[1] += 1
                if self._suspect[1] < _SUSPECT_TRIES:
                    return
                item = self._queue.peek(1, _MAX_BATCH_BYTES)[0]
            why = StoreError(f"the sagaboard sender failed {_SUSPECT_TRIES} times on it: {err!r}")
            self._give_up(item, why, "dropped_failing")
        except Exception:
            log.exception("cannot drop the event the sagaboard sender fails on")

    def _next_batch(self) -> list[Item] | None:
        """The head of the queue, once there is one; lingers ``flush_interval`` to fill a batch.

        Hands ``apply``'s reports to ``on_error`` first, in this thread.
        """
        while True:
            with self._cond:
                while not self._stopping and len(self._queue) == 0 and not self._reports:
                    if self._poll_due():
                        self._cond.release()  # asked without the lock: apply() never waits
                        try:
                            self._poll_requests()
                        finally:
                            self._cond.acquire()
                        continue
                    self._cond.wait(self._idle_wait())
                if self._stopping:
                    return None
            if not self._hand_over_reports():
                break
        with self._cond:
            deadline = time.monotonic() + self._flush_interval
            while not self._stopping and len(self._queue) < self._batch_size:
                left = deadline - time.monotonic()
                if left <= 0 or self._flushing:
                    break
                self._cond.wait(left)
            if self._stopping:
                return None
            self._hurry.clear()  # an old flush() must not cut this batch's first backoff short
            suspect = self._suspect is not None and self._suspect[0] == self._queue.head()
            return self._queue.peek(1 if suspect else self._batch_size, _MAX_BATCH_BYTES)

    def _hand_over_reports(self) -> bool:
        """Call on_error for what apply() reported (also between retries: an outage must not
        delay news of a local failure); ``True`` if there was any."""
        with self._cond:
            reports, self._reports = self._reports, []
        if not reports:
            return False
        self._tell(reports)
        with self._cond:
            self._reports_done += len(reports)
            self._cond.notify_all()
        return True

    def _screen(self, items: list[Item]) -> list[Item]:
        """The leading events of ``items`` that may be sent; unsendable ones at the head are
        dropped (and reported) here, so one of them never holds back the others."""
        clean: list[Item] = []
        for item in items:
            why = self._unsendable(item)
            if why is None:
                clean.append(item)
                continue
            if clean:
                break  # send what is before it first; it is then the head
            if why == "follower":
                self._drop_follower(item)
            else:
                problem = value_problem(_event_of(item.payload), "the event")
                error = SerializationError(
                    f"cannot be sent: {problem}", saga_id=_saga_of(item.payload)
                )
                self._give_up(item, error, why)
        return clean

    def _unsendable(self, item: Item) -> str | None:
        if self._refused_sagas and _saga_of(item.payload) in self._refused_sagas:
            return "follower"
        if not item.payload.isascii():
            try:
                item.payload.encode("utf-8")
            except UnicodeEncodeError:  # only a spool row that was not UTF-8 gets here
                return "unencodable"
        return None

    def _drop_follower(self, item: Item) -> None:
        """A later event of a saga whose earlier event was refused: not sent (module doc)."""
        with self._cond:
            self._counts["dropped_after_refusal"] += 1
        log.debug("event %r not sent: an earlier event of its saga was refused", _id_of(item))
        self._resolve(item.number, sent=0)

    def _deliver(self, items: list[Item], *, grow: bool) -> None:
        """Send ``items`` until acknowledged, isolated, or the store stops."""
        attempt = 0
        while not self._stopping:
            items = self._screen(items)
            if not items:
                return
            answer = self._post(items)
            if answer.kind == "ok":
                self._hear(answer.response)
                self._resolve(items[-1].number, sent=len(items))
                return
            if answer.kind == "bad":
                assert answer.response is not None
                self._isolate(items, answer.response)
                return
            attempt += 1
            with self._cond:
                self._counts["retried"] += 1
            self._hand_over_reports()
            if not self._pause(self._backoff(attempt), answer.retry_after):
                return
            if grow:  # same head, maybe more behind it now: order is unchanged
                with self._cond:
                    items = self._queue.peek(self._batch_size, _MAX_BATCH_BYTES) or items

    def _hear(self, response: httpx.Response | None) -> None:
        """Keep the rollbacks people asked for, as sagaboard's answer lists them."""
        self._last_heard = time.monotonic()
        if response is None or b'"rollback_requested"' not in response.content:
            return  # the common answer: nothing asked (and no JSON parse)
        try:
            asked = response.json().get("rollback_requested") or []
            heard = {
                str(r["saga_id"]): RollbackRequest(
                    by=str(r.get("by") or "an operator"),
                    reason=str(r.get("reason") or ""),
                    at=_when(r.get("at")),
                )
                for r in asked
            }
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            log.warning("sagaboard at %s: unreadable rollback requests: %r", self.url, err)
            return
        with self._cond:  # only sagas still running here (an ended one has nothing to stop)
            self._rollback_requests.update(
                (sid, r) for sid, r in heard.items() if sid in self._running
            )

    def _poll_due(self) -> bool:
        poll = self._rollback_poll
        return bool(poll and self._running and time.monotonic() - self._last_heard >= poll)

    def _idle_wait(self) -> float:
        poll = self._rollback_poll
        return min(_IDLE_WAIT, poll) if poll and self._running else _IDLE_WAIT

    def _poll_requests(self) -> None:
        """While idle (a long step), ask sagaboard for rollback requests of running sagas."""
        self._last_heard = time.monotonic()
        try:
            response = self._http.get(_REQUESTS_PATH)
        except httpx.TransportError:
            return  # an outage: the next answer or poll will tell
        if response.status_code == 200:
            self._hear(response)

    def rollback_requested(self, saga_id: str) -> RollbackRequest | None:
        """A person's request (on sagaboard) to roll back ``saga_id``, once heard; else ``None``.

        Heard in sagaboard's answers to the events this store sends, so without a
        network call: the engine asks at every step boundary and, on a request,
        rolls the saga back and raises :class:`~undo_core.RollbackRequestedError`.
        """
        return self._rollback_requests.get(saga_id)

    def _post(self, items: list[Item]) -> _Answer:
        body = '{"events":[' + ",".join(item.payload for item in items) + "]}"
        try:
            response = self._http.post(_EVENTS_PATH, content=body.encode())
        except httpx.TransportError as err:
            self._note_outage(f"cannot reach it: {err!r}")
            return _Answer("retry")
        status = response.status_code
        if 200 <= status < 300:
            if self._outage:
                self._outage = False
                log.info("sagaboard at %s is reachable again", self.url)
            return _Answer("ok", response)
        if status in (408, 429) or status >= 500:
            self._note_outage(f"it answered {status}")
            return _Answer("retry", response, retry_after(response, _MAX_RETRY_AFTER))
        if status < 400 or status in _CONFIG_STATUSES:
            self._note_outage(
                f"{api_error(response)}: check the URL and token", level=logging.ERROR
            )
            return _Answer("retry", response)
        return _Answer("bad", response)

    def _note_outage(self, why: str, *, level: int = logging.WARNING) -> None:
        """Log once per outage, not once per retry."""
        if not self._outage:
            self._outage = True
            log.log(level, "sagaboard at %s: %s; events stay queued and are retried", self.url, why)

    def _isolate(self, items: list[Item], response: httpx.Response) -> None:
        """Find the refused event of a batch; send the others, in order."""
        if len(items) == 1:
            self._drop(items[0], response)
            return
        index = api_error(response).index
        if index is not None and 0 <= index < len(items):
            if index:
                self._deliver(items[:index], grow=False)
            if not self._stopping:
                self._deliver([items[index]], grow=False)
            return  # the rest is the head of the queue again: sent as the next batch
        for item in items:
            if self._stopping:
                return
            self._deliver([item], grow=False)

    def _drop(self, item: Item, response: httpx.Response) -> None:
        self._give_up(item, api_error(response), "dropped_bad")

    def _give_up(self, item: Item, error: StoreError, count: str) -> None:
        """Drop one event sagaboard will never take, and its saga's later events; report it."""
        event = _event_of(item.payload)
        saga_id = _saga_of(item.payload)
        log.error(
            "sagaboard will not get event %r of saga %r (%s): it is dropped with the saga's "
            "later events; the other sagas' events go on",
            event.get("event_id"),
            saga_id,
            error,
        )
        with self._cond:
            self._counts[count] += 1
        if saga_id is not None:
            self._refused_sagas.add(saga_id)
        self._tell([_Report(event, error)])
        self._resolve(item.number, sent=0)

    def _tell(self, reports: list[_Report]) -> None:
        """Hand each report to ``on_error``; a failing hook is logged, never fatal."""
        if self._on_error is None:
            return
        for report in reports:
            try:
                self._on_error(report.event, report.error)
            except Exception:
                log.exception("on_error hook %r failed", self._on_error)

    def _resolve(self, number: int, *, sent: int) -> None:
        """Events up to ``number`` are done: remove them and wake flush() and blocked apply()."""
        with self._cond:
            try:
                self._queue.remove_through(number)
            except Exception:  # a spool that cannot delete: the events are resent (duplicates)
                log.exception("cannot remove sent events from the sagaboard queue")
            self._counts["sent"] += sent
            self._cond.notify_all()

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter, so many agents do not retry in step."""
        ceiling = min(self._max_backoff, _BASE_BACKOFF * 2.0 ** min(attempt - 1, 20))
        return ceiling * random.uniform(0.5, 1.0)

    def _pause(self, backoff: float, retry_after: float) -> bool:
        """Sleep before a retry; ``False`` if the store is stopping.

        The server's ``Retry-After`` is waited in full (only close() cuts it);
        our own backoff ends early when flush() asks to hurry.
        """
        if retry_after > 0 and self._stop.wait(retry_after):
            return False
        rest = backoff - retry_after
        if rest > 0 and self._hurry.wait(rest):
            self._hurry.clear()
        return not self._stopping


def _when(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _event_of(payload: str) -> dict[str, Any]:
    """The queued event as a dict (a spool row that is not JSON still gives its text)."""
    try:
        event = json.loads(payload)
    except ValueError:
        return {"event_id": None, "payload": payload[:200]}
    return event if isinstance(event, dict) else {"event_id": None, "payload": payload[:200]}


def _id_of(item: Item) -> str | None:
    """The ``event_id`` of a queued event, read from the start of its text (no full parse)."""
    try:
        eid, _ = _DECODER.raw_decode(item.payload, _EVENT_ID_AT)
    except (ValueError, IndexError):
        eid = _event_of(item.payload).get("event_id")
    return eid if isinstance(eid, str) else None


def _saga_of(payload: str) -> str | None:
    """The saga id of a queued event: its ``event_id`` is ``"<saga id>:<seq>"``."""
    eid = _id_of(Item(0, payload))
    return eid.rpartition(":")[0] if eid is not None else None


_open_stores: set[SagaboardStore] = set()


@atexit.register
def _close_open_stores() -> None:
    """Send what is queued before the interpreter ends (bounded by each store's timeout)."""
    for store in list(_open_stores):
        store.close(store._timeout)

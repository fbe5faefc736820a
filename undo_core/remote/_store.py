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
import logging
import threading
import time
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import NamedTuple, Self

import httpx

from ..stores.storage import RollbackRequest, SagaChange
from ..vocabulary.errors import LeaseError, SerializationError, StoreError
from ..vocabulary.records import SagaRecord, SagaSnapshot
from ..vocabulary.states import SagaStatus
from ._client import SagaboardClient
from ._errors import SagaboardAPIError
from ._queue import MemoryQueue, Outbox, SpoolQueue
from ._sender import IDLE_WAIT, ErrorHook, Report, Sender, event_of
from ._wire import change_to_event, encode_event, event_id, saga_from_json

__all__ = ["ErrorHook", "SagaboardStore"]

log = logging.getLogger("undo_core.remote")


class _Lease(NamedTuple):
    owner: str | None
    expires_at: datetime | None
    seq: int


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
        self._timeout = timeout
        self._block_timeout = max(0.0, block_timeout)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )
        self._reader = SagaboardClient(url, token, timeout=timeout, transport=transport)
        self._spooled = spool is not None
        self._queue: Outbox = SpoolQueue(spool) if spool is not None else MemoryQueue(max_queue)
        self._cond = threading.Condition()
        self._closed = False
        self._leases: dict[str, _Lease] = {}
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
        self._reported_sagas: set[str] = set()  # unencodable writes: on_error once per saga
        self._sender = Sender(
            self.url,
            self._http,
            self._queue,
            self._cond,
            self._counts,
            on_error=on_error,
            batch_size=batch_size,
            flush_interval=max(0.0, flush_interval),
            max_backoff=max(0.0, max_backoff),
            rollback_poll=rollback_poll,
        )
        self._sender.thread.start()
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
                self._sender.running.add(r.id)
            else:
                self._sender.running.discard(r.id)
                self._sender.rollback_requests.pop(r.id, None)
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
            if first and self._sender.on_error is not None:
                try:
                    event = change_to_event(change)
                except Exception:  # a time that cannot be converted: the id still says which
                    event = {"event_id": event_id(change)}
                self._sender.reports.append(Report(event, err))
                self._sender.reports_made += 1
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
        if threading.current_thread() is self._sender.thread:
            return False  # called from on_error: waiting on ourselves would deadlock
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target, reports = self._queue.last(), self._sender.reports_made
            self._sender.flushing += 1
            self._cond.notify_all()
            self._sender.hurry.set()
            try:
                return self._wait_through(target, reports, deadline)
            finally:
                self._sender.flushing -= 1

    def _wait_through(self, target: int, reports: int, deadline: float | None) -> bool:
        while (
            (head := self._queue.head()) is not None and head <= target
        ) or self._sender.reports_done < reports:
            if not self._sender.thread.is_alive():
                return False
            left = IDLE_WAIT if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            self._cond.wait(min(left, IDLE_WAIT))
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
            self._closed = self._sender.stopping = True
            self._cond.notify_all()
        self._sender.stop.set()
        self._sender.hurry.set()
        self._sender.thread.join(self._timeout + 1.0)  # a request in flight ends within its timeout
        self._shut(sent_all)
        return sent_all

    def _shut(self, sent_all: bool) -> None:
        with self._cond:
            left = len(self._queue)
            lost = [] if self._spooled or not left else self._queue.peek(left, 1 << 62)
            reports, self._sender.reports = self._sender.reports, []
            self._sender.reports_done += len(reports)
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
                event_of(lost[0].payload).get("event_id"),
                event_of(lost[-1].payload).get("event_id"),
            )
        elif not sent_all:
            log.warning("SagaboardStore for %s closed before its flush ended", self.url)
        why = StoreError(f"not sent: the store for {self.url} closed before it could be")
        self._sender.tell([*reports, *(Report(event_of(i.payload), why) for i in lost)])

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

    def rollback_requested(self, saga_id: str) -> RollbackRequest | None:
        """A person's request (on sagaboard) to roll back ``saga_id``, once heard; else ``None``.

        Heard in sagaboard's answers to the events this store sends, so without a
        network call: the engine asks at every step boundary and, on a request,
        rolls the saga back and raises :class:`~undo_core.RollbackRequestedError`.
        """
        return self._sender.rollback_requests.get(saga_id)


_open_stores: set[SagaboardStore] = set()


@atexit.register
def _close_open_stores() -> None:
    """Send what is queued before the interpreter ends (bounded by each store's timeout)."""
    for store in list(_open_stores):
        store.close(store._timeout)

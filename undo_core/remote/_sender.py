"""The sender of ``SagaboardStore``: one daemon thread that sends its queue in batches.

It sends the head of the queue, removes events once acknowledged, retries with backoff,
isolates and reports an event sagaboard refuses, and hears the rollbacks people ask for
(the guarantees are the store's module doc, :mod:`undo_core.remote._store`). It shares
the store's queue, lock and counts; what the store reads or sets of it (its thread, the
stop and hurry signals, ``apply()``'s reports, the rollbacks heard) has plain names.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

import httpx

from ..stores.serialize import value_problem
from ..stores.storage import RollbackRequest
from ..vocabulary.errors import SerializationError, StoreError
from ._client import retry_after
from ._errors import api_error
from ._queue import Item, Outbox

log = logging.getLogger("undo_core.remote")

ErrorHook = Callable[[dict[str, Any], StoreError], None]
"""``on_error(event, error)``: called once for each event sagaboard will never get (module doc)."""

_EVENTS_PATH = "/api/v1/events"
_REQUESTS_PATH = "/api/v1/rollback-requests"
_MAX_BATCH_BYTES = 900_000  # under the server's default SAGABOARD_API_MAX_BODY (1 MiB)
_BASE_BACKOFF = 0.1
_MAX_RETRY_AFTER = 300.0
IDLE_WAIT = 1.0  # the sender and flush() re-check their state at least this often
_CONFIG_STATUSES = frozenset({401, 403, 404, 405})
_SUSPECT_TRIES = 3  # unexplained sender failures on one head event before it is dropped
_EVENT_ID_AT = len('{"event_id":')  # every payload starts so (change_to_event's first key)
_DECODER = json.JSONDecoder()


class Report(NamedTuple):
    """An event sagaboard will never get, and why: for ``on_error``."""

    event: dict[str, Any]
    error: StoreError


class _Answer(NamedTuple):
    """What the server's answer to one batch means for the sender."""

    kind: str  # "ok" | "retry" | "bad"
    response: httpx.Response | None = None
    retry_after: float = 0.0


class Sender:
    """The daemon thread of one :class:`~undo_core.remote.SagaboardStore`, and its state."""

    def __init__(
        self,
        url: str,
        http: httpx.Client,
        queue: Outbox,
        cond: threading.Condition,
        counts: dict[str, int],
        *,
        on_error: ErrorHook | None,
        batch_size: int,
        flush_interval: float,
        max_backoff: float,
        rollback_poll: float | None,
    ) -> None:
        self.url = url
        self._http = http
        self._queue = queue
        self._cond = cond
        self._counts = counts
        self.on_error = on_error
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._max_backoff = max_backoff
        self._rollback_poll = rollback_poll
        self.stop = threading.Event()
        self.hurry = threading.Event()
        self.stopping = False
        self.flushing = 0
        self._outage = False
        self.rollback_requests: dict[str, RollbackRequest] = {}
        self.running: set[str] = set()  # sagas IN_PROGRESS here: asked about while idle
        self._last_heard = time.monotonic()
        self.reports: list[Report] = []  # from apply(), for the sender to hand to on_error
        self.reports_made = 0
        self.reports_done = 0
        self._refused_sagas: set[str] = set()  # their later events are not sent
        self._suspect: list[int] | None = None  # [head number, unexplained failures]
        self.thread = threading.Thread(target=self._run, name="sagaboard-sender", daemon=True)

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
                while not self.stopping and len(self._queue) == 0 and not self.reports:
                    if self._poll_due():
                        self._cond.release()  # asked without the lock: apply() never waits
                        try:
                            self._poll_requests()
                        finally:
                            self._cond.acquire()
                        continue
                    self._cond.wait(self._idle_wait())
                if self.stopping:
                    return None
            if not self._hand_over_reports():
                break
        with self._cond:
            deadline = time.monotonic() + self._flush_interval
            while not self.stopping and len(self._queue) < self._batch_size:
                left = deadline - time.monotonic()
                if left <= 0 or self.flushing:
                    break
                self._cond.wait(left)
            if self.stopping:
                return None
            self.hurry.clear()  # an old flush() must not cut this batch's first backoff short
            suspect = self._suspect is not None and self._suspect[0] == self._queue.head()
            return self._queue.peek(1 if suspect else self._batch_size, _MAX_BATCH_BYTES)

    def _hand_over_reports(self) -> bool:
        """Call on_error for what apply() reported (also between retries: an outage must not
        delay news of a local failure); ``True`` if there was any."""
        with self._cond:
            reports, self.reports = self.reports, []
        if not reports:
            return False
        self.tell(reports)
        with self._cond:
            self.reports_done += len(reports)
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
                problem = value_problem(event_of(item.payload), "the event")
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
        while not self.stopping:
            items = self._screen(items)
            if not items:
                return
            answer = self._post(items)
            if answer.kind == "ok":
                self.hear(answer.response)
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

    def hear(self, response: httpx.Response | None) -> None:
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
            self.rollback_requests.update(
                (sid, r) for sid, r in heard.items() if sid in self.running
            )

    def _poll_due(self) -> bool:
        poll = self._rollback_poll
        return bool(poll and self.running and time.monotonic() - self._last_heard >= poll)

    def _idle_wait(self) -> float:
        poll = self._rollback_poll
        return min(IDLE_WAIT, poll) if poll and self.running else IDLE_WAIT

    def _poll_requests(self) -> None:
        """While idle (a long step), ask sagaboard for rollback requests of running sagas."""
        self._last_heard = time.monotonic()
        try:
            response = self._http.get(_REQUESTS_PATH)
        except httpx.TransportError:
            return  # an outage: the next answer or poll will tell
        if response.status_code == 200:
            self.hear(response)

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
            if not self.stopping:
                self._deliver([items[index]], grow=False)
            return  # the rest is the head of the queue again: sent as the next batch
        for item in items:
            if self.stopping:
                return
            self._deliver([item], grow=False)

    def _drop(self, item: Item, response: httpx.Response) -> None:
        self._give_up(item, api_error(response), "dropped_bad")

    def _give_up(self, item: Item, error: StoreError, count: str) -> None:
        """Drop one event sagaboard will never take, and its saga's later events; report it."""
        event = event_of(item.payload)
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
        self.tell([Report(event, error)])
        self._resolve(item.number, sent=0)

    def tell(self, reports: list[Report]) -> None:
        """Hand each report to ``on_error``; a failing hook is logged, never fatal."""
        if self.on_error is None:
            return
        for report in reports:
            try:
                self.on_error(report.event, report.error)
            except Exception:
                log.exception("on_error hook %r failed", self.on_error)

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
        if retry_after > 0 and self.stop.wait(retry_after):
            return False
        rest = backoff - retry_after
        if rest > 0 and self.hurry.wait(rest):
            self.hurry.clear()
        return not self.stopping


def _when(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None


def event_of(payload: str) -> dict[str, Any]:
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
        eid = event_of(item.payload).get("event_id")
    return eid if isinstance(eid, str) else None


def _saga_of(payload: str) -> str | None:
    """The saga id of a queued event: its ``event_id`` is ``"<saga id>:<seq>"``."""
    eid = _id_of(Item(0, payload))
    return eid.rpartition(":")[0] if eid is not None else None

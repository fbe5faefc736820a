"""``SagaboardGate`` / ``AsyncSagaboardGate``: people in sagaboard decide for sagas run here.

undo_core's engine asks its gate two questions (see :mod:`undo_core.vocabulary.gates`);
these gates put them to sagaboard's operators and wait for the answer::

    client = SagaboardClient(url, token)
    with (
        SagaboardStore(url, token) as store,
        SagaboardGate(client, store=store, max_wait=3600) as gate,
    ):
        saga = Saga("storebot-return", store=store, gate=gate, on_compensation_failure="halt")
        ...

**May this undo run?** (``approve_compensation``) The gate flushes ``store``
(the step must have reached the server, AWAITING_APPROVAL), asks for the
step's approval (``POST .../approval``: the current one, or a new PENDING one)
and long-polls it. APPROVED → ``Decision.approve(actor="user:<name>")``;
REJECTED or EXPIRED → ``Decision.reject(reason)``; VOID (what would run
changed) → it asks again. Nothing within ``max_wait`` seconds, or
cancelled → ``Decision.wait()``: the rollback pauses *before* this undo (older
steps are not undone first), the saga stays COMPENSATING, and
``resume_rollback()`` later asks again and gets the same approval.

**An undo failed** (``compensation_failed``, under
``on_compensation_failure="halt"``): the gate flushes ``store`` (so operators
see the step ROLLBACK_FAILED) and long-polls the step's decision: an
operator's retry → ``Decision.retry(actor=...)``, resolve →
``Decision.resolve(note, actor=...)``, "leave it failed" → ``Decision.leave()``.
Nothing within ``max_wait``, or cancelled → ``Decision.leave()``: the saga
ends ROLLBACK_FAILED, and a decision taken later is picked up by
``resume_rollback()``.

**Acknowledging (at least once).** A retry or resolve handed to the engine is
acknowledged to sagaboard (which clears the operator's pending request) only
*after* the engine carried it out: on the gate's next call, or on
:meth:`SagaboardGate.close` / :meth:`~SagaboardGate.acknowledge`, each time
after flushing ``store`` so the transition events arrive first. Until then
the dashboard shows the request as in progress and nobody can ask twice. If
the process dies between carrying out the action and acknowledging it, the
request is still pending when the saga is resumed, and the gate hands it out
again: an undo may run twice, never zero times (undos get an idempotency key
for this). Acknowledging right away would be at most once instead, and a
crash would silently drop an operator's click. Close the gate (or use it as a
context manager, inside the store's block) so the last action is acknowledged.

**Waiting is bounded and cancellable.** Each long-poll lasts at most
``wait_seconds`` (the server caps it at 30); ``max_wait`` bounds a whole
question (``None``: wait as long as people take). Setting ``cancel`` (a
:class:`threading.Event`, or :meth:`SagaboardGate.cancel`) stops waiting at
once, even mid-request, and answers as on timeout. The async gate takes an
:class:`asyncio.Event`; cancelling the task that runs the saga raises
``CancelledError`` as usual (never swallowed), and leaves the saga just as a
``Decision.wait()`` would: COMPENSATING, to be resumed.

**Errors.** Connection errors, timeouts, 408, 429, 5xx and a 404 while the
step has not reached the server are retried with backoff (from ``poll``
seconds, doubling, up to 30 s) within ``max_wait``. Other refusals (a bad
token: 401; a saga run by sagaboard: 409) are logged on the
``undo_core.remote`` logger and answered as a timeout. The gates do not
raise for the server's sake: an exception would end the rollback for the
step (the engine treats it as "no decision yet").

The rules are written once, as generators yielding effects (call the API,
flush the store, sleep), like the engine's own; the sync and async gates only
differ in how they perform them.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from types import TracebackType
from typing import Any, NamedTuple, Self, TypeVar

from ..vocabulary.gates import CARRIED_OUT, ApprovalRequest, Decision, FailedCompensation
from ._client import MAX_WAIT, AsyncSagaboardClient, SagaboardClient
from ._errors import SagaboardAPIError, SagaboardUnavailable
from ._store import SagaboardStore

__all__ = ["AsyncSagaboardGate", "SagaboardGate"]

log = logging.getLogger("undo_core.remote")

T = TypeVar("T")

_MAX_BACKOFF = 30.0
_CANCEL_CHECK = 0.05
"""How often a sync request in flight checks ``cancel`` (seconds)."""
_FLUSH_TIMEOUT = 10.0
_MIN_FLUSH = 2.0
_SETTLED = frozenset({"ROLLED_BACK", "RESOLVED", "REJECTED", "FAILED"})
_RETRYABLE_STATUSES = frozenset({408, 429})


# ---------------------------------------------------------------- effects


class _Api(NamedTuple):
    """Effect: call the client's ``method(*args, **kwargs)``."""

    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class _Flush(NamedTuple):
    """Effect: flush the mirroring store, waiting at most ``timeout`` seconds."""

    timeout: float


class _Sleep(NamedTuple):
    seconds: float


_Effect = _Api | _Flush | _Sleep


class _Outcome(NamedTuple):
    value: Any = None
    error: Exception | None = None
    cancelled: bool = False


_Flow = Generator[_Effect, _Outcome, T]


class _Stop(NamedTuple):
    """No answer: why the gate stopped waiting (timeout, cancelled, refused)."""

    why: str


class _Deadline:
    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.at = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float | None:
        return None if self.at is None else self.at - time.monotonic()

    def passed(self) -> bool:
        left = self.left()
        return left is not None and left <= 0

    def cap(self, seconds: float) -> float:
        left = self.left()
        return seconds if left is None else max(0.0, min(seconds, left))


class _Pacer:
    """When the last request of a question went out (long-polls are paced by ``poll``)."""

    def __init__(self, last: float | None = None) -> None:
        self.last = last


def _flush_timeout(deadline: _Deadline) -> float:
    """Mirroring gets a little time even when no more waiting for people is allowed."""
    return max(_MIN_FLUSH, deadline.cap(_FLUSH_TIMEOUT))


def _actors(names: Any) -> str | None:
    if not isinstance(names, list) or not names:
        return None
    return ", ".join(f"user:{name}" for name in names)


def _approval_decision(approval: dict[str, Any]) -> Decision | None:
    """The engine's answer for a decided approval; None while PENDING (or VOID)."""
    status = approval.get("status")
    reason = str(approval.get("decided_reason") or "").strip()
    if status == "APPROVED":
        return Decision.approve(actor=_actors(approval.get("decided_by")), reason=reason or None)
    if status == "REJECTED":
        return Decision.reject(reason or "rejected", actor=_actors(approval.get("decided_by")))
    if status == "EXPIRED":
        return Decision.reject(reason or "no decision in time: rejected", actor="system")
    return None


def _retryable(error: Exception, *, not_found: bool) -> bool:
    if isinstance(error, SagaboardUnavailable):
        return True
    if isinstance(error, SagaboardAPIError):
        return (
            error.status >= 500
            or error.status in _RETRYABLE_STATUSES
            or (not_found and error.status == 404)
        )
    return False


# ---------------------------------------------------------------- the rules, once


class _GateRules:
    """Configuration and the two questions as flows of effects (shared by both gates)."""

    def __init__(
        self,
        *,
        wait_seconds: float,
        max_wait: float | None,
        poll: float,
    ) -> None:
        if not 0 <= wait_seconds <= MAX_WAIT:
            raise ValueError(f"wait_seconds must be 0..{MAX_WAIT:g}, got {wait_seconds!r}")
        if max_wait is not None and not max_wait >= 0:
            raise ValueError(f"max_wait must be None or >= 0, got {max_wait!r}")
        if not poll > 0:
            raise ValueError(f"poll must be > 0, got {poll!r}")
        self.wait_seconds = float(wait_seconds)
        self.max_wait = None if max_wait is None else float(max_wait)
        self.poll = float(poll)
        self._handed: dict[tuple[str, str], dict[str, Any]] = {}
        """Retries and resolves handed to the engine and not acknowledged yet."""
        self._handed_lock = threading.Lock()

    # ------------------------------------------------------------ approve_compensation

    def _approval_flow(self, request: ApprovalRequest) -> _Flow[Decision]:
        deadline = _Deadline(self.max_wait)
        yield from self._acknowledge_flow(deadline)
        ask = _Api(
            "request_approval", (request.saga_id, request.step.id), {"why": request.why or None}
        )
        answer = yield from self._until_answered(ask, deadline, flush=True, not_found=True)
        pacer = _Pacer(time.monotonic())  # the ask was the first look
        while not isinstance(answer, _Stop):
            decision = _approval_decision(answer)
            if decision is not None:
                return decision
            if answer.get("status") == "VOID":  # what would run changed: a new approval
                answer = yield from self._until_answered(ask, deadline, flush=True, not_found=True)
                continue
            poll = _Api("get_approval", (answer["id"],), {})
            answer = yield from self._long_poll(poll, deadline, pacer)
        step = f"{request.saga_id}/{request.step.id}"
        log.info("no approval for %s yet (%s): the rollback pauses here", step, answer.why)
        return Decision.wait(reason=f"no approval yet ({answer.why}); resume the rollback later")

    # ------------------------------------------------------------ approval_needed

    def _rule_flow(self, request: ApprovalRequest) -> _Flow[str | None]:
        deadline = _Deadline(self.max_wait)
        ask = _Api("approval_rule", (request.saga_id, request.step.id), {})
        answer = yield from self._until_answered(ask, deadline, flush=True, not_found=True)
        if isinstance(answer, _Stop):
            # Nobody could say whether a person must decide: ask for one (safe side).
            return f"sagaboard's policies could not be read ({answer.why})"
        return str(answer["why"]) if answer.get("needed") else None

    # ------------------------------------------------------------ compensation_failed

    def _failure_flow(self, request: FailedCompensation) -> _Flow[Decision]:
        deadline = _Deadline(self.max_wait)
        key = (request.saga_id, request.step.id)
        yield from self._acknowledge_flow(deadline, flush=True)
        poll = _Api("get_decision", key, {})
        pacer = _Pacer()
        answer = yield from self._long_poll(poll, deadline, pacer, not_found=True)
        while not isinstance(answer, _Stop):
            action, by = answer.get("action"), answer.get("by")
            reason = answer.get("reason") or None
            if action == "leave":
                return Decision.leave(actor=by, reason=reason)
            if action in CARRIED_OUT:
                if not self._was_handed(key, answer):
                    with self._handed_lock:
                        self._handed[key] = dict(answer)
                    if action == "retry":
                        return Decision.retry(actor=by, reason=reason)
                    return Decision.resolve(reason or "resolved by an operator", actor=by)
                # Handed out before and carried out (the engine asks again after a
                # failed retry), but not acknowledged yet: acknowledge, then wait on.
                yield from self._acknowledge_flow(deadline)
            elif answer.get("state") in _SETTLED:
                why = f"sagaboard has step {key[1]!r} {answer['state']}: nothing to decide"
                return Decision.leave(reason=why)
            answer = yield from self._long_poll(poll, deadline, pacer, not_found=True)
        log.info("no operator decision for %s/%s (%s): left failed", *key, answer.why)
        return Decision.leave(reason=f"no operator decision ({answer.why})")

    def _was_handed(self, key: tuple[str, str], answer: dict[str, Any]) -> bool:
        with self._handed_lock:
            handed = self._handed.get(key)
        return (
            handed is not None
            and handed.get("action") == answer.get("action")
            and handed.get("at") == answer.get("at")
        )

    # ------------------------------------------------------------ acknowledging

    def _acknowledge_flow(self, deadline: _Deadline, *, flush: bool = False) -> _Flow[int]:
        """Acknowledge what the engine carried out; returns how many are still unacknowledged.

        One try each (the client retries a failed connection itself): one that
        fails stays handed, and is acknowledged on a later call.
        """
        with self._handed_lock:
            handed = list(self._handed.items())
        if handed or flush:
            # Transition events first, then the ack: sagaboard never shows the request
            # cleared while the step still looks untouched. Not all sent: ack later.
            flushed = yield _Flush(_flush_timeout(deadline))
            if flushed.cancelled or flushed.value is not True:
                handed = []
        for (saga_id, step_id), answer in handed:
            action = answer.get("action")
            ack = _Api("ack_decision", (saga_id, step_id, action), {"at": answer.get("at")})
            outcome = yield ack
            if outcome.cancelled:
                break
            error = outcome.error
            if error is not None and _retryable(error, not_found=False):
                log.warning(
                    "cannot acknowledge %s of %s/%s yet: %s", action, saga_id, step_id, error
                )
                continue
            if error is not None:  # 409: cleared or replaced meanwhile; nothing left to do
                conflict = isinstance(error, SagaboardAPIError) and error.status == 409
                (log.info if conflict else log.warning)(
                    "acknowledging %s of %s/%s: %s", action, saga_id, step_id, error
                )
            with self._handed_lock:
                if self._handed.get((saga_id, step_id)) is answer:
                    del self._handed[(saga_id, step_id)]
        with self._handed_lock:
            return len(self._handed)

    # ------------------------------------------------------------ waiting

    def _long_poll(
        self, call: _Api, deadline: _Deadline, pacer: _Pacer, *, not_found: bool = False
    ) -> _Flow[dict[str, Any] | _Stop]:
        """One long-poll of ``call``: ``wait`` capped by the deadline, at most one per ``poll`` s.

        The first long-poll of a question always goes out (``max_wait=0``: one
        look); later ones only while the deadline allows.
        """
        if pacer.last is not None:
            if deadline.passed():
                return _Stop(f"waited {deadline.seconds:g} s")
            rest = deadline.cap(self.poll - (time.monotonic() - pacer.last))
            if rest > 0 and (yield _Sleep(rest)).cancelled:  # answered early: do not hammer
                return _Stop("cancelled")
            if deadline.passed():
                return _Stop(f"waited {deadline.seconds:g} s")
        pacer.last = time.monotonic()
        polled = call._replace(kwargs={**call.kwargs, "wait": deadline.cap(self.wait_seconds)})
        return (yield from self._until_answered(polled, deadline, not_found=not_found))

    def _until_answered(
        self, call: _Api, deadline: _Deadline, *, flush: bool = False, not_found: bool = False
    ) -> _Flow[dict[str, Any] | _Stop]:
        """``call`` until it answers, retrying what may pass with backoff, within the deadline."""
        attempt = 0
        while True:
            if flush and (yield _Flush(_flush_timeout(deadline))).cancelled:
                return _Stop("cancelled")
            outcome = yield call
            if outcome.cancelled:
                return _Stop("cancelled")
            if outcome.error is None:
                answer: dict[str, Any] = outcome.value
                return answer
            error = outcome.error
            if not _retryable(error, not_found=not_found):
                log.error("sagaboard refused %s: %s", call.method, error)
                return _Stop(f"sagaboard refused {call.method}: {error}")
            attempt += 1
            if deadline.passed():
                return _Stop(f"waited {deadline.seconds:g} s; last error: {error}")
            delay = min(_MAX_BACKOFF, self.poll * 2.0 ** min(attempt - 1, 16))
            delay = deadline.cap(delay * random.uniform(0.5, 1.0))
            (log.warning if attempt == 1 else log.debug)(
                "%s failed (%s); retrying in %.2f s", call.method, error, delay
            )
            if (yield _Sleep(delay)).cancelled:
                return _Stop("cancelled")


# ---------------------------------------------------------------- the sync gate


class SagaboardGate(_GateRules):
    """An :class:`~undo_core.ApprovalGate` whose answers come from sagaboard's operators.

    ``client``: a :class:`SagaboardClient` with the project's token. ``store``:
    the :class:`SagaboardStore` mirroring the saga (flushed before asking, so the
    step is on the server). ``wait_seconds``: how long each long-poll is held
    (0..30). ``max_wait``: the longest one question waits (``None``: until
    people decide). ``poll``: the least time between two requests, and the first
    backoff after an error. ``cancel``: set it to stop waiting (see the module doc).
    """

    def __init__(
        self,
        client: SagaboardClient,
        *,
        store: SagaboardStore | None = None,
        wait_seconds: float = 25.0,
        max_wait: float | None = None,
        poll: float = 1.0,
        cancel: threading.Event | None = None,
    ) -> None:
        super().__init__(wait_seconds=wait_seconds, max_wait=max_wait, poll=poll)
        self.client = client
        self.store = store
        self.cancel_event = cancel if cancel is not None else threading.Event()

    def approval_needed(self, request: ApprovalRequest) -> str | None:
        """Whether the project's policies on the server want a person for this undo."""
        return self._run(self._rule_flow(request))

    def approve_compensation(self, request: ApprovalRequest) -> Decision:
        return self._run(self._approval_flow(request))

    def compensation_failed(self, request: FailedCompensation) -> Decision:
        return self._run(self._failure_flow(request))

    def cancel(self) -> None:
        """Stop waiting: a question being asked now (and later ones) answers as on timeout."""
        self.cancel_event.set()

    def acknowledge(self, timeout: float = 10.0) -> int:
        """Acknowledge the retries and resolves the engine carried out; returns how many are left.

        Flushes the store first. Runs even after :meth:`cancel`.
        """
        left: int = self._run(
            self._acknowledge_flow(_Deadline(timeout), flush=True), cancellable=False
        )
        return left

    def close(self, timeout: float = 10.0) -> None:
        """:meth:`acknowledge` what is left (the client and store stay open: they are yours)."""
        left = self.acknowledge(timeout)
        if left:
            log.warning("%d operator action(s) carried out but not acknowledged to sagaboard", left)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------ performing effects

    def _run(self, flow: _Flow[T], *, cancellable: bool = True) -> T:
        try:
            effect = next(flow)
            while True:
                effect = flow.send(self._perform(effect, cancellable))
        except StopIteration as stop:
            result: T = stop.value
            return result

    def _perform(self, effect: _Effect, cancellable: bool) -> _Outcome:
        if isinstance(effect, _Sleep):
            if not cancellable:
                time.sleep(effect.seconds)
                return _Outcome()
            return _Outcome(cancelled=self.cancel_event.wait(effect.seconds))
        if cancellable and self.cancel_event.is_set():
            return _Outcome(cancelled=True)
        if isinstance(effect, _Flush):
            if self.store is None:
                return _Outcome(True)
            store = self.store
            return self._call(lambda: store.flush(effect.timeout), cancellable)
        method = getattr(self.client, effect.method)
        return self._call(lambda: method(*effect.args, **effect.kwargs), cancellable)

    def _call(self, fn: Callable[[], Any], cancellable: bool) -> _Outcome:
        """``fn()``; if cancellable, in a daemon thread, abandoned once ``cancel`` is set."""
        if not cancellable:
            try:
                return _Outcome(fn())
            except Exception as err:
                return _Outcome(error=err)
        done = threading.Event()
        box: list[_Outcome] = []

        def run() -> None:
            try:
                box.append(_Outcome(fn()))
            except Exception as err:
                box.append(_Outcome(error=err))
            finally:
                done.set()

        threading.Thread(target=run, name="sagaboard-gate", daemon=True).start()
        while not done.wait(_CANCEL_CHECK):
            if self.cancel_event.is_set():
                return _Outcome(cancelled=True)  # the request ends on its own, unheard
        if not box:  # pragma: no cover - run() died of a BaseException
            return _Outcome(error=RuntimeError("the request was interrupted"))
        return box[0]


# ---------------------------------------------------------------- the async gate


class AsyncSagaboardGate(_GateRules):
    """:class:`SagaboardGate` for :class:`~undo_core.AsyncSaga` (an ``AsyncApprovalGate``).

    Takes an :class:`AsyncSagaboardClient`; ``cancel`` is an :class:`asyncio.Event`.
    """

    def __init__(
        self,
        client: AsyncSagaboardClient,
        *,
        store: SagaboardStore | None = None,
        wait_seconds: float = 25.0,
        max_wait: float | None = None,
        poll: float = 1.0,
        cancel: asyncio.Event | None = None,
    ) -> None:
        super().__init__(wait_seconds=wait_seconds, max_wait=max_wait, poll=poll)
        self.client = client
        self.store = store
        self.cancel_event = cancel if cancel is not None else asyncio.Event()

    async def approval_needed(self, request: ApprovalRequest) -> str | None:
        """Whether the project's policies on the server want a person for this undo."""
        return await self._run(self._rule_flow(request))

    async def approve_compensation(self, request: ApprovalRequest) -> Decision:
        return await self._run(self._approval_flow(request))

    async def compensation_failed(self, request: FailedCompensation) -> Decision:
        return await self._run(self._failure_flow(request))

    def cancel(self) -> None:
        """Stop waiting (call it in the event loop's thread); see :meth:`SagaboardGate.cancel`."""
        self.cancel_event.set()

    async def acknowledge(self, timeout: float = 10.0) -> int:
        """See :meth:`SagaboardGate.acknowledge`."""
        left: int = await self._run(
            self._acknowledge_flow(_Deadline(timeout), flush=True), cancellable=False
        )
        return left

    async def aclose(self, timeout: float = 10.0) -> None:
        """See :meth:`SagaboardGate.close`."""
        left = await self.acknowledge(timeout)
        if left:
            log.warning("%d operator action(s) carried out but not acknowledged to sagaboard", left)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------ performing effects

    async def _run(self, flow: _Flow[T], *, cancellable: bool = True) -> T:
        try:
            effect = next(flow)
            while True:
                effect = flow.send(await self._perform(effect, cancellable))
        except StopIteration as stop:
            result: T = stop.value
            return result
        finally:
            flow.close()

    async def _perform(self, effect: _Effect, cancellable: bool) -> _Outcome:
        if isinstance(effect, _Sleep):
            if not cancellable:
                await asyncio.sleep(effect.seconds)
                return _Outcome()
            try:
                await asyncio.wait_for(self.cancel_event.wait(), effect.seconds)
            except TimeoutError:
                return _Outcome()
            return _Outcome(cancelled=True)
        if cancellable and self.cancel_event.is_set():
            return _Outcome(cancelled=True)
        if isinstance(effect, _Flush):
            if self.store is None:
                return _Outcome(True)
            return await self._call(self.store.aflush(effect.timeout), cancellable)
        method = getattr(self.client, effect.method)
        return await self._call(method(*effect.args, **effect.kwargs), cancellable)

    async def _call(self, work: Awaitable[Any], cancellable: bool) -> _Outcome:
        """Await ``work``; when cancellable, give it up as soon as ``cancel`` is set."""
        task = asyncio.ensure_future(work)
        waiter = asyncio.ensure_future(self.cancel_event.wait()) if cancellable else None
        try:
            await asyncio.wait(
                {task} if waiter is None else {task, waiter},
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not task.done():
                return _Outcome(cancelled=True)
            try:
                return _Outcome(task.result())
            except Exception as err:
                return _Outcome(error=err)
        finally:
            for pending in (task, waiter):
                if pending is not None and not pending.done():
                    pending.cancel()

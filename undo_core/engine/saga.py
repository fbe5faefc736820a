"""``Saga`` (plain functions) and ``AsyncSaga`` (coroutines): one engine, two drivers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

from .. import tracing
from ..vocabulary.errors import StepTimeoutError
from ..vocabulary.gates import GateQuestions
from ..vocabulary.records import StepSnapshot
from ..vocabulary.states import SagaStatus
from ..vocabulary.tools import Tool
from .core import SagaCore
from .effects import Ask, Call, Effect, Flow, Outcome, Sleep
from .reports import RollbackReport

__all__ = ["AsyncSaga", "Saga"]

# Outputs that cannot be awaitables: skip the (slow, ABC-based) isawaitable check.
_PLAIN = frozenset({type(None), dict, list, tuple, str, bytes, int, float, bool})
_tuple = tuple.__new__  # an Outcome per call, built positionally (fields: value, error)
assert Outcome._fields == ("value", "error")


def _call_with_timeout(call: Call) -> Any:
    if call.timeout is None:
        return call.fn(*call.args)
    # A plain function cannot be interrupted: wait for it in a worker thread and
    # stop waiting at the deadline (the thread runs on; the step counts as failed).
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="undo_core")
    try:
        return pool.submit(call.fn, *call.args).result(timeout=call.timeout)
    except concurrent.futures.TimeoutError:
        raise StepTimeoutError(f"{call.what} timed out after {call.timeout:g}s") from None
    finally:
        pool.shutdown(wait=False)


class Saga(SagaCore):
    """A saga for synchronous code: ``execute`` calls the tool and rolls back on failure.

    Not thread-safe: one saga is driven by one thread at a time.
    """

    def _check_gate(self, gate: GateQuestions) -> None:
        if inspect.iscoroutinefunction(gate.approve_compensation) or inspect.iscoroutinefunction(
            gate.compensation_failed
        ):
            raise TypeError("Saga needs a synchronous gate; use AsyncSaga for an async one")

    def _drive(self, flow: Flow[Any]) -> Any:
        try:
            effect = next(flow)
            while True:
                effect = flow.send(self._perform(effect))
        except StopIteration as stop:
            return stop.value
        except BaseException:
            self._ledger.abandon()
            raise

    def _perform(self, effect: Effect) -> Outcome | None:
        if isinstance(effect, Sleep):
            self._ledger.clock.sleep(effect.seconds)
            return None
        try:
            if isinstance(effect, Ask):
                value = effect.question(effect.request)
            elif effect.span is None:
                # A call without a deadline (the common case) runs here, with no extra frame.
                if effect.timeout is None:
                    value = effect.fn(*effect.args)
                else:
                    value = _call_with_timeout(effect)
            else:
                with tracing.current(effect.span):
                    value = _call_with_timeout(effect)
        except Exception as err:
            return Outcome(error=err)
        if type(value) not in _PLAIN and inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            return Outcome(error=TypeError(f"{effect!r} returned an awaitable; use AsyncSaga"))
        return _tuple(Outcome, (value, None))

    def execute(
        self,
        tool: Tool,
        input: Any = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        step_id: str | None = None,
    ) -> Any:
        """Run ``tool`` as the next step and return its output.

        On failure, with ``auto_rollback_on_failure`` (the default), undo every
        completed step newest first and raise :class:`SagaRollbackError`;
        without it, the saga becomes FAILED and the tool's error propagates.
        ``metadata`` (JSON values, e.g. the framework's tool call id) is kept on the step.
        ``step_id`` names the step (else ``step-N``); a PENDING step of that id, left
        by a process that died while running it, runs again (declarative sagas resume so).
        """
        return self._drive(self._flows.execute(tool, input, step_id=step_id, metadata=metadata))

    def rollback(self, *, actor: str | None = None) -> RollbackReport:
        """Undo every COMPLETED step, newest first. A second call does nothing."""
        report: RollbackReport = self._drive(self._flows.rollback(actor))
        return report

    def resume_rollback(self, *, actor: str | None = None) -> RollbackReport:
        """Continue a rollback that stopped (halted on a failed undo, or interrupted)."""
        report: RollbackReport = self._drive(self._flows.rollback(actor, resume=True))
        return report

    def resume_after_crash(self, *, actor: str = "recovery") -> RollbackReport:
        """Roll back what a dead process left of this saga, from where it stopped.

        For a saga taken over with :meth:`restore`: a step found PENDING becomes
        IN_DOUBT, an undo found running is recorded as interrupted and runs again.
        :func:`~undo_core.recover` calls it for each saga it takes over.
        """
        report: RollbackReport = self._drive(self._flows.recover(actor))
        return report

    def retry_compensation(self, step_id: str, *, actor: str | None = None) -> StepSnapshot:
        """Run a ROLLBACK_FAILED (or IN_DOUBT) step's undo again, under its retry policy."""
        snapshot: StepSnapshot = self._drive(self._flows.retry(step_id, actor))
        return snapshot

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            if self.status is SagaStatus.IN_PROGRESS:
                self.complete()
        elif self.status in (SagaStatus.IN_PROGRESS, SagaStatus.FAILED):
            self.rollback()


class AsyncSaga(SagaCore):
    """A saga for ``async`` code; tools and gate may be plain or async functions."""

    _async = True

    async def _drive(self, flow: Flow[Any]) -> Any:
        try:
            effect = next(flow)
            while True:
                effect = flow.send(await self._perform(effect))
        except StopIteration as stop:
            return stop.value
        except BaseException:
            self._ledger.abandon()
            raise

    async def _perform(self, effect: Effect) -> Outcome | None:
        if isinstance(effect, Sleep):
            await self._ledger.clock.asleep(effect.seconds)
            return None
        try:
            if isinstance(effect, Ask):
                value = effect.question(effect.request)
                if inspect.isawaitable(value):
                    value = await value
            elif effect.span is None:
                value = await self._call(effect)
            else:
                with tracing.current(effect.span):
                    value = await self._call(effect)
        except Exception as err:
            return Outcome(error=err)
        return Outcome(value)

    async def _call(self, call: Call) -> Any:
        if inspect.iscoroutinefunction(call.fn) or inspect.iscoroutinefunction(
            getattr(call.fn, "__call__", None)  # noqa: B004
        ):
            coro = call.fn(*call.args)
        elif call.timeout is not None:
            coro = asyncio.to_thread(call.fn, *call.args)
        else:
            value = call.fn(*call.args)
            return await value if inspect.isawaitable(value) else value
        if call.timeout is None:
            return await coro
        try:
            return await asyncio.wait_for(coro, call.timeout)
        except TimeoutError:
            raise StepTimeoutError(f"{call.what} timed out after {call.timeout:g}s") from None

    async def execute(
        self,
        tool: Tool,
        input: Any = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        step_id: str | None = None,
    ) -> Any:
        """Run ``tool`` as the next step and return its output (see :meth:`Saga.execute`)."""
        flow = self._flows.execute(tool, input, step_id=step_id, metadata=metadata)
        return await self._drive(flow)

    async def rollback(self, *, actor: str | None = None) -> RollbackReport:
        """Undo every COMPLETED step, newest first. A second call does nothing."""
        report: RollbackReport = await self._drive(self._flows.rollback(actor))
        return report

    async def resume_rollback(self, *, actor: str | None = None) -> RollbackReport:
        """Continue a rollback that stopped (halted on a failed undo, or interrupted)."""
        report: RollbackReport = await self._drive(self._flows.rollback(actor, resume=True))
        return report

    async def resume_after_crash(self, *, actor: str = "recovery") -> RollbackReport:
        """:meth:`Saga.resume_after_crash` for async tools."""
        report: RollbackReport = await self._drive(self._flows.recover(actor))
        return report

    async def retry_compensation(self, step_id: str, *, actor: str | None = None) -> StepSnapshot:
        """Run a ROLLBACK_FAILED (or IN_DOUBT) step's undo again, under its retry policy."""
        snapshot: StepSnapshot = await self._drive(self._flows.retry(step_id, actor))
        return snapshot

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            if self.status is SagaStatus.IN_PROGRESS:
                self.complete()
        elif self.status in (SagaStatus.IN_PROGRESS, SagaStatus.FAILED):
            await self.rollback()

"""Agent Saga's declarative form: named steps with ``run``/``compensate`` over one state.

    >>> from undo_core import define_saga
    >>> step = {"name": "one", "run": lambda ctx, s: s.update(x=1)}
    >>> saga = define_saga(name="demo", steps=[step])
    >>> saga.run({}, {})["state"]
    {'x': 1}

Steps run in order with the same ``ctx`` and ``state`` objects. When one
fails, the completed steps are compensated newest first with that same state;
the first compensation that fails halts the cascade and is audited as
``agent.saga.compensation_failed`` at CRITICAL severity. Built on
:class:`~undo_core.Saga`, so the same state machine, store and events apply.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from ..stores.storage import SagaStore
from ..vocabulary.errors import (
    SagaClosedError,
    SagaDefinitionError,
    SagaNotFoundError,
    SagaRollbackError,
    StepNotFoundError,
)
from ..vocabulary.states import SagaStatus, StepState
from ..vocabulary.tools import Tool, _is_async, define_tool
from .audit import AuditSink, audit_listener
from .core import SagaCore
from .saga import AsyncSaga, Saga

__all__ = ["RunResult", "SagaDefinition", "SagaStep", "define_saga"]


@dataclass(frozen=True, slots=True)
class SagaStep:
    """One declarative step. ``compensate`` is optional (nothing to undo)."""

    name: str
    run: Callable[[Any, Any], Any]
    compensate: Callable[[Any, Any], Any] | None = None


class RunResult(TypedDict):
    status: str
    saga_id: str
    state: Any


def _as_step(raw: SagaStep | Mapping[str, Any], position: int) -> SagaStep:
    if isinstance(raw, SagaStep):
        step = raw
    elif isinstance(raw, Mapping):
        unknown = set(raw) - {"name", "run", "compensate"}
        if unknown:
            raise SagaDefinitionError(f"step #{position}: unknown keys {sorted(unknown)}")
        step = SagaStep(
            name=raw.get("name"),  # type: ignore[arg-type]
            run=raw.get("run"),  # type: ignore[arg-type]
            compensate=raw.get("compensate"),
        )
    else:
        raise SagaDefinitionError(f"step #{position} must be a dict or SagaStep")
    if not isinstance(step.name, str) or not step.name.strip():
        raise SagaDefinitionError(f"step #{position} needs a non-empty name")
    if not callable(step.run):
        raise TypeError(f"step {step.name!r}: run must be callable")
    if step.compensate is not None and not callable(step.compensate):
        raise TypeError(f"step {step.name!r}: compensate must be callable or omitted")
    return step


class SagaDefinition:
    """A reusable saga; :meth:`run` (sync) or :meth:`arun` (async) executes it."""

    def __init__(
        self,
        name: str,
        steps: Iterable[SagaStep | Mapping[str, Any]],
        *,
        audit: AuditSink | None = None,
        store: SagaStore | None = None,
        **saga_options: Any,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise SagaDefinitionError("a saga definition needs a non-empty name")
        parsed = [_as_step(raw, i) for i, raw in enumerate(steps or [], start=1)]
        if not parsed:
            raise SagaDefinitionError(f"saga {name!r} needs at least one step")
        seen: set[str] = set()
        for step in parsed:
            if step.name in seen:
                raise SagaDefinitionError(f"saga {name!r}: duplicate step name {step.name!r}")
            seen.add(step.name)
        self.name = name
        self.steps: tuple[SagaStep, ...] = tuple(parsed)
        self.audit = audit
        self.store = store
        self._options = {"on_compensation_failure": "halt", **saga_options}
        self._audit_listener = audit_listener(audit) if audit is not None else None

    @property
    def is_async(self) -> bool:
        return any(
            _is_async(f)  # also callable objects with an ``async def __call__``
            for s in self.steps
            for f in (s.run, s.compensate)
            if f is not None
        )

    # ------------------------------------------------------------ plumbing

    def _tools(self, ctx: Any, state: Any) -> dict[str, Tool]:
        def make(step: SagaStep) -> Tool:
            run, comp = step.run, step.compensate
            undo = None
            if comp is not None:
                if inspect.iscoroutinefunction(comp):

                    async def aundo(output: Any, input: Any) -> Any:
                        return await comp(ctx, state)

                    undo = aundo
                else:

                    def sundo(output: Any, input: Any) -> Any:
                        return comp(ctx, state)

                    undo = sundo
            if inspect.iscoroutinefunction(run):

                async def aexecute(input: Any) -> Any:
                    return await run(ctx, state)

                return define_tool(step.name, aexecute, undo)

            def execute(input: Any) -> Any:
                return run(ctx, state)

            return define_tool(step.name, execute, undo)

        return {s.name: make(s) for s in self.steps}

    def _new_saga(self, cls: type[SagaCore], state: Any, saga_id: str | None) -> Any:
        options = dict(self._options)
        listeners = list(options.pop("listeners", ()))
        if self._audit_listener is not None:
            listeners.append(self._audit_listener)
        saga = cls(self.name, store=self.store, listeners=listeners, saga_id=saga_id, **options)
        self._mark(saga, state)
        return saga

    def _mark(self, saga: SagaCore, state: Any) -> None:
        saga.declare(self.name, state)

    def _restore(self, cls: type[SagaCore], saga_id: str, ctx: Any) -> tuple[Any, Any]:
        if self.store is None:
            raise SagaDefinitionError(f"saga {self.name!r} has no store, so it cannot resume")
        snapshot = self.store.load(saga_id)
        if snapshot is None:
            raise SagaNotFoundError(f"no saga {saga_id!r} in the store")
        record = snapshot.record
        if record.options.get("definition") != self.name:
            raise SagaDefinitionError(
                f"saga {saga_id!r} belongs to {record.options.get('definition')!r}, "
                f"not to {self.name!r}"
            )
        if record.status.ended:
            raise SagaClosedError(
                f"saga {saga_id!r}",
                record.status,
                SagaStatus.IN_PROGRESS,
                f"it already ended as {record.status}; there is nothing to resume",
            )
        state = record.state
        options = dict(self._options)
        listeners = list(options.pop("listeners", ()))
        if self._audit_listener is not None:
            listeners.append(self._audit_listener)
        options.pop("on_compensation_failure", None)  # the stored saga's own options apply
        options.pop("auto_rollback_on_failure", None)
        saga = cls.restore(
            self.store, saga_id, self._tools(ctx, state), listeners=listeners, **options
        )
        self._mark(saga, state)
        return saga, state

    def _error(self, err: SagaRollbackError) -> SagaRollbackError:
        cause = err.cause
        message = f"saga '{self.name}' failed at step '{err.failed_step}': {cause}"
        if err.compensation_cause is not None:
            message += (
                f" — and compensation of step '{err.failed_comp_step}' "
                f"subsequently failed: {err.compensation_cause}"
            )
        return SagaRollbackError(
            message,
            saga_id=err.saga_id,
            saga_name=err.saga_name,
            status=err.status,
            cause=cause,
            failed_step=err.failed_step,
            failed_step_name=err.failed_step_name,
            compensation_cause=err.compensation_cause,
            failed_comp_step_name=err.failed_comp_step_name,
            failed_comp_step=err.failed_comp_step,
            rolled_back=err.rolled_back,
            failed=err.failed,
            skipped=err.skipped,
            rejected=err.rejected,
            unresolved=err.unresolved,
        )

    def _result(self, saga: SagaCore, state: Any) -> RunResult:
        return {"status": "completed", "saga_id": saga.id, "state": state}

    def _failed_from_store(self, saga: SagaCore) -> SagaRollbackError:
        """The error for a saga that resume found already rolling back."""
        failed = saga.record.failed_step or "?"
        try:
            error = saga.step(failed).error
        except StepNotFoundError:
            error = None
        cause = RuntimeError(error or "failed before a crash")
        return SagaRollbackError(
            "",
            saga_id=saga.id,
            saga_name=saga.name,
            status=saga.status,
            cause=cause,
            failed_step=failed,
            failed_step_name=failed,
        )

    # ------------------------------------------------------------ sync

    def _run_sync(self, saga: Saga, ctx: Any, state: Any) -> RunResult:
        tools = self._tools(ctx, state)
        done = _done_before(saga)
        try:
            for step in self.steps:
                if step.name not in done:
                    saga.execute(tools[step.name], None, step_id=step.name)
        except SagaRollbackError as err:
            raise self._error(err) from err.cause
        saga.complete()
        return self._result(saga, state)

    def run(self, ctx: Any = None, state: Any = None, *, saga_id: str | None = None) -> RunResult:
        """Run every step in order; returns ``{"status": "completed", "saga_id", "state"}``.

        On a step failure, compensates and raises :class:`SagaRollbackError`
        with Agent Saga's message.
        """
        if self.is_async:
            raise TypeError(f"saga {self.name!r} has async steps: use 'await arun(...)'")
        state = {} if state is None else state
        saga: Saga = self._new_saga(Saga, state, saga_id)
        return self._run_sync(saga, ctx, state)

    def resume(self, saga_id: str, ctx: Any = None) -> RunResult:
        """Continue a saga from its last checkpoint in the store (after a crash)."""
        if self.is_async:
            raise TypeError(f"saga {self.name!r} has async steps: use 'await aresume(...)'")
        saga, state = self._restore(Saga, saga_id, ctx)
        if saga.status is SagaStatus.COMPENSATING:
            saga.resume_rollback()
            err = self._failed_from_store(saga)
            raise self._error(err) from err.cause
        return self._run_sync(saga, ctx, state)

    # ------------------------------------------------------------ async

    async def _run_async(self, saga: AsyncSaga, ctx: Any, state: Any) -> RunResult:
        tools = self._tools(ctx, state)
        done = _done_before(saga)
        try:
            for step in self.steps:
                if step.name not in done:
                    await saga.execute(tools[step.name], None, step_id=step.name)
        except SagaRollbackError as err:
            raise self._error(err) from err.cause
        saga.complete()
        return self._result(saga, state)

    async def arun(
        self, ctx: Any = None, state: Any = None, *, saga_id: str | None = None
    ) -> RunResult:
        """:meth:`run` for async (or mixed) steps."""
        state = {} if state is None else state
        saga: AsyncSaga = self._new_saga(AsyncSaga, state, saga_id)
        return await self._run_async(saga, ctx, state)

    async def aresume(self, saga_id: str, ctx: Any = None) -> RunResult:
        """:meth:`resume` for async (or mixed) steps."""
        saga, state = self._restore(AsyncSaga, saga_id, ctx)
        if saga.status is SagaStatus.COMPENSATING:
            await saga.resume_rollback()
            err = self._failed_from_store(saga)
            raise self._error(err) from err.cause
        return await self._run_async(saga, ctx, state)


def _done_before(saga: SagaCore) -> frozenset[str]:
    """The steps a resumed saga already ran (all but a PENDING one) before its process died."""
    return frozenset(s.id for s in saga.steps if s.state is not StepState.PENDING)


def define_saga(
    *,
    name: str,
    steps: Iterable[SagaStep | Mapping[str, Any]],
    audit: AuditSink | None = None,
    store: SagaStore | None = None,
    **saga_options: Any,
) -> SagaDefinition:
    """Define a declarative saga (Agent Saga's ``create``). See :class:`SagaDefinition`."""
    return SagaDefinition(name, steps, audit=audit, store=store, **saga_options)

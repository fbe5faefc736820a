"""``SagaCore``: the one face of a saga, shared by :class:`Saga` and :class:`AsyncSaga`.

A saga is made of three parts, each in its own module:

* its :class:`~undo_core.engine.ledger.Ledger` (``ledger.py``): the record and steps,
  written to the store one checked change at a time, and the lease;
* its :class:`~undo_core.engine.flows.Flows` (``flows.py``): the algorithms (run
  forward, roll back newest first, retry an undo, ask the gate, recover) as
  generators of effects;
* its driver (``saga.py``): performs the effects, plainly or with ``await``.

This class checks what it is given, answers the public reads (from its base,
:class:`SagaReads`), offers the manual flow (steps registered here, run elsewhere)
and the hooks other modules build on:
:meth:`restore` (recovery), :meth:`declare` and ``execute(step_id=...)``
(declarative sagas).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Self

from .. import tracing
from ..stores.storage import MemoryStore, SagaStore
from ..vocabulary.clock import Clock, SystemClock
from ..vocabulary.errors import TransitionError
from ..vocabulary.gates import (
    ApprovalGate,
    ApprovalPolicy,
    AsyncApprovalGate,
    AutoApproveGate,
    GateQuestions,
)
from ..vocabulary.outcome import RollbackAssessment, StepFacts, assess_rollback
from ..vocabulary.records import SagaKind, SagaRecord, SagaSnapshot, StepSnapshot
from ..vocabulary.states import SagaStatus, StepState
from ..vocabulary.tools import Tool
from .flows import CompensationFailureMode, Flows, check_tool
from .ledger import Ledger, Listener, default_owner, take_lease
from .reports import RollbackReport

__all__ = ["CompensationFailureMode", "Listener", "SagaCore", "default_owner"]

_AUTO_APPROVE = GateQuestions.of(AutoApproveGate())
"""The default gate's questions (it keeps no state, so every saga may share them)."""


def _tool_map(tools: Mapping[str, Tool] | Iterable[Tool]) -> dict[str, Tool]:
    if isinstance(tools, Mapping):
        return {t.name: t for t in tools.values()} | dict(tools)
    return {t.name: t for t in tools}


class SagaReads:
    """What anyone may read of a saga: its record, its steps, how a rollback stands.

    The read half of :class:`SagaCore`'s face, kept apart so the class that drives a saga
    stays small; it holds nothing of its own (the ledger and the flows are the saga's).
    """

    _ledger: Ledger
    _flows: Flows

    @property
    def id(self) -> str:
        return self._ledger.record.id

    @property
    def name(self) -> str:
        return self._ledger.record.name

    @property
    def status(self) -> SagaStatus:
        return self._ledger.record.status

    @property
    def record(self) -> SagaRecord:
        """The saga's own row as this process holds it (status, options, failed step...)."""
        return self._ledger.record

    @property
    def steps(self) -> tuple[StepSnapshot, ...]:
        """Immutable snapshots of every step, oldest first."""
        return tuple(s.snapshot() for s in self._ledger.steps)

    @property
    def store(self) -> SagaStore:
        return self._ledger.store

    def step(self, step_id: str) -> StepSnapshot:
        """One step's snapshot; :class:`StepNotFoundError` if unknown."""
        return self._ledger.get(step_id).snapshot()

    def snapshot(self) -> SagaSnapshot:
        return SagaSnapshot(record=self._ledger.record, steps=self.steps)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` on every transition; returns an unsubscribe function."""
        listeners = self._ledger.listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener)

    def report(self) -> RollbackReport:
        """Where every step stands now, as a rollback would report it."""
        return self._flows.report()

    def assess(self) -> RollbackAssessment:
        """How the rollback stands for a person: clean, or which steps are exceptions."""
        return assess_rollback(
            self.status, (StepFacts.of(s.snapshot()) for s in self._ledger.steps)
        )

    def __repr__(self) -> str:
        kind = type(self).__name__
        return f"<{kind} {self.name!r} {self.id} {self.status} steps={len(self._ledger.steps)}>"


class SagaCore(SagaReads):
    """State, checks and the manual flow shared by :class:`Saga` and :class:`AsyncSaga`."""

    _async = False

    def __init__(
        self,
        name: str | None = None,
        *,
        auto_rollback_on_failure: bool = True,
        on_compensation_failure: CompensationFailureMode = "continue",
        store: SagaStore | None = None,
        gate: ApprovalGate | AsyncApprovalGate | None = None,
        approval_policy: ApprovalPolicy | None = None,
        listeners: Iterable[Listener] = (),
        clock: Clock | None = None,
        saga_id: str | None = None,
        owner: str | None = None,
        lease_seconds: float = 300.0,
        actor: str | None = None,
    ) -> None:
        _check_arguments(name, on_compensation_failure, store, approval_policy)
        questions = _AUTO_APPROVE
        if gate is not None:  # the default gate suits every saga
            questions = GateQuestions.of(gate)
            self._check_gate(questions)
        clock = clock or SystemClock()
        now = clock.now()
        owner = owner or default_owner()
        lease = timedelta(seconds=lease_seconds)
        record = _new_record(
            saga_id or str(uuid.uuid4()),
            name or f"saga-{int(now.timestamp() * 1000)}",
            now,
            options={
                "on_compensation_failure": on_compensation_failure,
                "auto_rollback_on_failure": auto_rollback_on_failure,
                "kind": SagaKind.IMPERATIVE,
            },
            owner=owner,
            lease=lease,
        )
        self._ledger = Ledger(
            record,
            store=store if store is not None else MemoryStore(),
            clock=clock,
            owner=owner,
            lease=lease,
            listeners=list(listeners),
            actor=actor,
        )
        self._flows = Flows(
            self._ledger,
            questions,
            auto_rollback_on_failure=auto_rollback_on_failure,
            on_compensation_failure=on_compensation_failure,
            approval_policy=approval_policy,
            runs_async=self._async,
        )
        trace = tracing.saga_trace(record.id, record.name)
        if trace is not None:
            self._flows.trace = trace
            self._ledger.listeners.append(trace.on_event)

    def _check_gate(self, gate: GateQuestions) -> None:
        """Refuse a gate this kind of saga cannot ask (:class:`Saga` refuses async ones)."""

    # ------------------------------------------------------------ settings

    @property
    def auto_rollback_on_failure(self) -> bool:
        """A failed step rolls the saga back (else the saga becomes FAILED)."""
        return self._flows.auto_rollback_on_failure

    @auto_rollback_on_failure.setter
    def auto_rollback_on_failure(self, value: bool) -> None:
        self._flows.auto_rollback_on_failure = value

    @property
    def on_compensation_failure(self) -> CompensationFailureMode:
        """After a failed undo: ``"continue"`` with older steps, or ``"halt"`` and ask the gate."""
        return self._flows.on_compensation_failure

    @on_compensation_failure.setter
    def on_compensation_failure(self, value: CompensationFailureMode) -> None:
        self._flows.on_compensation_failure = value

    # ------------------------------------------------------------ manual flow

    def start(self) -> None:
        """Write the saga to its store now (otherwise it is written with its first step).

        Lets a saga that has no step yet be seen, listed and attached to elsewhere.
        """
        self._ledger.start()

    def add_step(
        self,
        tool: Tool,
        input: Any = None,
        *,
        requires_approval: bool | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Register a step without running it (agent-undo's ``addStep``); returns its id."""
        tool = check_tool(tool)
        self._flows.require_open("add_step")
        return self._flows.add_step(
            tool, input, requires_approval=requires_approval, metadata=metadata
        ).id

    def mark_completed(self, step_id: str, output: Any = None) -> None:
        """A registered step ran: record its output (it will be undone on rollback)."""
        step = self._ledger.get(step_id)
        self._flows.require_open("mark_completed")
        self._flows.complete_step(step, output, happened=False)

    def mark_failed(self, step_id: str, error: BaseException | str) -> None:
        """A registered step failed; the saga stays open (call ``rollback()`` to undo)."""
        step = self._ledger.get(step_id)
        self._flows.require_open("mark_failed")
        self._flows.mark_failed(step, error)

    def complete(self) -> None:
        """Finish the saga successfully: COMPLETED (nothing is undone)."""
        pending = [s.id for s in self._ledger.steps if s.state is StepState.PENDING]
        if pending and self.status is SagaStatus.IN_PROGRESS:
            raise TransitionError(
                f"saga {self.name!r}",
                self.status,
                SagaStatus.COMPLETED,
                f"steps {', '.join(pending)} are still PENDING: mark them completed or failed",
            )
        self._ledger.start()
        self._ledger.saga_to(SagaStatus.COMPLETED)

    def begin_rollback(self, *, actor: str | None = None) -> None:
        """Mark the saga COMPENSATING without running any undo yet.

        For undos that run elsewhere (a worker): steps never marked completed
        are failed, as in any rollback, and ``resume_rollback()`` then runs the
        compensations from this state.
        """
        if self.status not in (SagaStatus.IN_PROGRESS, SagaStatus.FAILED, SagaStatus.COMPLETED):
            raise TransitionError(
                f"saga {self.name!r}", self.status, SagaStatus.COMPENSATING, "nothing to roll back"
            )
        self._ledger.start()
        for step in self._ledger.steps:
            if step.state is StepState.PENDING:
                self._flows.fail_step(step, "never marked completed before the rollback")
        self._ledger.saga_to(SagaStatus.COMPENSATING, actor=actor)

    def release(self) -> None:
        """Let go of the saga's lease, so another process may attach to it at once."""
        self._ledger.release()

    def resolve(self, step_id: str, note: str, *, actor: str | None = None) -> StepSnapshot:
        """A human handled a failed (or in-doubt) undo by hand: the step becomes RESOLVED."""
        step = self._flows.human_step(step_id, "resolve")
        self._flows.resolve_step(step, note, actor or self._ledger.actor)
        self._flows.settle(actor)
        return step.snapshot()

    # ------------------------------------------------------------ hooks

    def declare(self, definition: str, state: Any) -> None:
        """Mark this saga as a run of the declarative saga ``definition``, with its shared state.

        Written with the saga's next change. Recovery leaves such a saga to its
        definition's ``resume()``, which knows how to go on.
        """
        record = self._ledger.record
        options = {**record.options, "kind": SagaKind.DECLARATIVE, "definition": definition}
        self._ledger.mark(options=options, state=state)

    @classmethod
    def restore(
        cls,
        store: SagaStore,
        saga_id: str,
        tools: Mapping[str, Tool] | Iterable[Tool],
        *,
        owner: str | None = None,
        lease_seconds: float = 300.0,
        clock: Clock | None = None,
        **options: Any,
    ) -> Self:
        """Rebuild a saga from its store, to retry or resolve it from another process.

        Takes the saga's lease first: raises :class:`SagaNotFoundError` for an
        unknown id and :class:`LeaseError` while another live process holds it.
        The saga runs with its stored options; ``options`` are the constructor's
        others (``gate``, ``listeners``...).
        """
        owner = owner or default_owner()
        now = (clock or SystemClock()).now()
        snapshot = take_lease(store, saga_id, owner, now, timedelta(seconds=lease_seconds))
        stored = snapshot.record.options
        saga = cls(
            snapshot.record.name,
            auto_rollback_on_failure=stored.get("auto_rollback_on_failure", True),
            on_compensation_failure=stored.get("on_compensation_failure", "continue"),
            store=store,
            saga_id=snapshot.record.id,
            owner=owner,
            lease_seconds=lease_seconds,
            clock=clock,
            **options,
        )
        saga._ledger.load(snapshot, _tool_map(tools))
        return saga


def _check_arguments(
    name: str | None,
    on_compensation_failure: str,
    store: SagaStore | None,
    approval_policy: ApprovalPolicy | None,
) -> None:
    """Refuse a bad constructor argument at once, not at the first step that would use it."""
    if on_compensation_failure not in ("continue", "halt"):
        raise ValueError(
            f"on_compensation_failure must be 'continue' or 'halt', got {on_compensation_failure!r}"
        )
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError("saga name must be a non-empty string or None")
    if store is not None and not (
        callable(getattr(store, "apply", None))
        and callable(getattr(store, "load", None))
        and callable(getattr(store, "acquire_lease", None))
    ):
        raise TypeError(f"store must implement SagaStore, got {type(store).__name__}")
    if approval_policy is not None and not callable(approval_policy):
        raise TypeError("approval_policy must be callable (step snapshot -> bool)")


def _new_record(
    saga_id: str,
    name: str,
    now: datetime,
    *,
    options: dict[str, Any],
    owner: str,
    lease: timedelta,
) -> SagaRecord:
    """A new saga's record: IN_PROGRESS, leased to ``owner`` from ``now``; not yet stored."""
    return SagaRecord(
        id=saga_id,
        name=name,
        status=SagaStatus.IN_PROGRESS,
        created_at=now,
        updated_at=now,
        options=options,
        lease_owner=owner,
        lease_expires_at=now + lease,
    )

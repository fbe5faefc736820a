"""The saga state machine, written once for both :class:`Saga` and :class:`AsyncSaga`.

The algorithms (execute a step, roll back, retry an undo, ask a gate) are
generators that *yield effects* (call this function, ask the gate, sleep) and
receive their outcomes. The sync and async sagas only differ in how they
perform an effect, so the rules live here, in one place.

Every state change goes through :meth:`SagaCore._step_to` or
:meth:`SagaCore._saga_to`: check the transition table, write to the store,
then change memory, then tell listeners. A transition that the store refuses
did not happen, except for transitions that record something the world
already did (a tool ran, an undo ran): those change memory anyway and the
store error is raised afterwards, never swallowed.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, Self

from .clock import Clock, SystemClock
from .effects import Ask, Call, Flow, Sleep
from .errors import (
    GateError,
    SagaClosedError,
    SagaRollbackError,
    StepNotFoundError,
    StoreError,
    TransitionError,
)
from .gates import (
    ApprovalPolicy,
    ApprovalRequest,
    AutoApproveGate,
    Decision,
    DecisionAction,
    FailedCompensation,
)
from .outcome import RollbackAssessment, StepFacts, assess_rollback
from .records import (
    AttemptOutcome,
    CompensationAttempt,
    EventKind,
    SagaEvent,
    SagaRecord,
    SagaSnapshot,
    StepSnapshot,
)
from .reports import RollbackReport, rollback_message
from .rules import check_change, is_unsettled
from .states import (
    SETTLED_STEP_STATES,
    SagaStatus,
    StepState,
    check_saga_transition,
    check_step_transition,
)
from .steps import StepRow, describe, make
from .storage import MemoryStore, SagaChange, SagaStore
from .tools import ExecuteContext, Tool, UndoContext

__all__ = ["CompensationFailureMode", "Listener", "SagaCore", "default_owner"]

log = logging.getLogger("undo_core")

CompensationFailureMode = Literal["continue", "halt"]
Listener = Callable[[SagaEvent], None]


class StepRowOutcome:
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"
    LEFT = "left"
    DONE = "done"
    WAITING = "waiting"


def default_owner() -> str:
    """A lease owner id naming this host and process, so recovery can tell if it died."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- the core


class SagaCore:
    """State, transitions and algorithms shared by :class:`Saga` and :class:`AsyncSaga`."""

    _async = False

    def __init__(
        self,
        name: str | None = None,
        *,
        auto_rollback_on_failure: bool = True,
        on_compensation_failure: CompensationFailureMode = "continue",
        store: SagaStore | None = None,
        gate: Any = None,
        approval_policy: ApprovalPolicy | None = None,
        listeners: Iterable[Listener] = (),
        clock: Clock | None = None,
        saga_id: str | None = None,
        owner: str | None = None,
        lease_seconds: float = 300.0,
        actor: str | None = None,
    ) -> None:
        if on_compensation_failure not in ("continue", "halt"):
            raise ValueError(
                "on_compensation_failure must be 'continue' or 'halt', "
                f"got {on_compensation_failure!r}"
            )
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError("saga name must be a non-empty string or None")
        if store is not None and not all(
            callable(getattr(store, m, None)) for m in ("apply", "load", "acquire_lease")
        ):
            raise TypeError(f"store must implement SagaStore, got {type(store).__name__}")
        if approval_policy is not None and not callable(approval_policy):
            raise TypeError("approval_policy must be callable (step snapshot -> bool)")
        self._gate = gate if gate is not None else AutoApproveGate()
        self._check_gate(self._gate)
        self._clock: Clock = clock or SystemClock()
        now = self._clock.now()
        self.auto_rollback_on_failure = auto_rollback_on_failure
        self.on_compensation_failure: CompensationFailureMode = on_compensation_failure
        self._store: SagaStore = store if store is not None else MemoryStore()
        self._approval_policy = approval_policy
        self._listeners: list[Listener] = list(listeners)
        self._actor = actor
        self._owner = owner or default_owner()
        self._lease = timedelta(seconds=lease_seconds)
        self._half_lease = self._lease / 2
        self._steps: list[StepRow] = []
        self._by_id: dict[str, StepRow] = {}
        self._first_comp_error: tuple[BaseException, StepRow] | None = None
        self._pending_store_error: StoreError | None = None
        self._record = SagaRecord(
            id=saga_id or str(uuid.uuid4()),
            name=name or f"saga-{int(now.timestamp() * 1000)}",
            status=SagaStatus.IN_PROGRESS,
            created_at=now,
            updated_at=now,
            options={
                "on_compensation_failure": on_compensation_failure,
                "auto_rollback_on_failure": auto_rollback_on_failure,
                "kind": "imperative",
            },
            lease_owner=self._owner,
            lease_expires_at=now + self._lease,
        )
        self._started = False

    # ------------------------------------------------------------ public reads

    @property
    def id(self) -> str:
        return self._record.id

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def status(self) -> SagaStatus:
        return self._record.status

    @property
    def steps(self) -> tuple[StepSnapshot, ...]:
        """Immutable snapshots of every step, oldest first."""
        return tuple(s.snapshot() for s in self._steps)

    @property
    def store(self) -> SagaStore:
        return self._store

    def step(self, step_id: str) -> StepSnapshot:
        """One step's snapshot; :class:`StepNotFoundError` if unknown."""
        return self._get(step_id).snapshot()

    def snapshot(self) -> SagaSnapshot:
        return SagaSnapshot(self._record, self.steps)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` on every transition; returns an unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def report(self) -> RollbackReport:
        """Where every step stands now, as a rollback would report it."""
        newest_first = list(reversed(self._steps))

        def ids(*states: StepState) -> tuple[str, ...]:
            return tuple(s.id for s in newest_first if s.state in states)

        return RollbackReport(
            status=self.status,
            rolled_back=ids(StepState.ROLLED_BACK),
            failed=ids(StepState.ROLLBACK_FAILED),
            skipped=tuple(
                s.id for s in newest_first if s.state is StepState.COMPLETED and not s.has_undo
            ),
            rejected=ids(StepState.REJECTED),
            resolved=ids(StepState.RESOLVED),
            in_doubt=ids(StepState.IN_DOUBT),
            unresolved=tuple(s.id for s in newest_first if self._unsettled(s)),
        )

    def assess(self) -> RollbackAssessment:
        """How the rollback stands for a person: clean, or which steps are exceptions."""
        return assess_rollback(self.status, (StepFacts.of(s.snapshot()) for s in self._steps))

    def __repr__(self) -> str:
        kind = type(self).__name__
        return f"<{kind} {self.name!r} {self.id} {self.status} steps={len(self._steps)}>"

    # ------------------------------------------------------------ checks

    def _check_gate(self, gate: Any) -> None:
        for method in ("approve_compensation", "compensation_failed"):
            if not callable(getattr(gate, method, None)):
                raise TypeError(f"gate must implement ApprovalGate: missing {method}()")

    def _check_tool(self, tool: Any) -> Tool:
        if not isinstance(tool, Tool):
            raise TypeError(f"expected a Tool from define_tool(), got {type(tool).__name__}")
        return tool

    def _require_open(self, action: str) -> None:
        if self.status is not SagaStatus.IN_PROGRESS:
            raise SagaClosedError(
                f"saga {self.name!r}",
                self.status,
                SagaStatus.IN_PROGRESS,
                f"it has ended, so {action} is refused (the tool was not called)",
            )

    def _get(self, step_id: str) -> StepRow:
        try:
            return self._by_id[step_id]
        except (KeyError, TypeError):
            raise StepNotFoundError(f"saga {self.name!r} has no step {step_id!r}") from None

    def _unsettled(self, step: StepRow) -> bool:
        return is_unsettled(step.state, step.has_undo, self.status)

    # ------------------------------------------------------------ transitions

    def _commit(
        self,
        record: SagaRecord,
        step: StepRow | None,
        event: SagaEvent,
        before: StepSnapshot | None = None,
    ) -> None:
        """Store one change, after the rules every store enforces (``undo_core.rules``).

        ``before``: the step as it was stored (``None`` for a new step). The engine's
        own moves pass the same rules as any change a server receives, so the two
        cannot drift apart: a refusal here is a bug in the engine, and stops it.
        """
        snap = step.snapshot() if step is not None else None
        change = make(SagaChange, (record, snap, event))
        check_change(self._record if self._started else None, before, change, steps=self._steps)
        self._store.apply(change)
        if not self._listeners:
            return
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a listener must never break the saga
                log.exception("saga listener %r failed on %s", listener, event)

    def _next_record(self, next_step_number: int | None = None, **changes: Any) -> SagaRecord:
        now = self._clock.now()
        r = self._record
        expires = r.lease_expires_at
        if expires is None or r.lease_owner != self._owner or expires < now + self._half_lease:
            expires = now + self._lease  # renew once half the lease is spent
        record = make(
            SagaRecord,
            (
                r.id,
                r.name,
                r.status,
                r.created_at,
                now,
                r.seq + 1,
                r.next_step_number if next_step_number is None else next_step_number,
                r.options,
                r.state,
                r.failed_step,
                self._owner,  # every write (re)claims the lease: fencing refuses a stale owner
                expires,
            ),
        )
        return record._replace(**changes) if changes else record

    def _event(
        self,
        record: SagaRecord,
        kind: EventKind,
        to_state: str,
        from_state: str | None,
        step: StepRow | None = None,
        *,
        actor: str | None = None,
        detail: str | None = None,
    ) -> SagaEvent:
        return make(
            SagaEvent,
            (
                record.id,
                record.name,
                record.seq,
                kind,
                to_state,
                from_state,
                record.updated_at,
                step.id if step else None,
                step.tool_name if step else None,
                actor or self._actor,
                detail,
            ),
        )

    def _saga_to(self, status: SagaStatus, *, actor: str | None = None, **fields: Any) -> None:
        check_saga_transition(self.status, status, saga_id=self.id)
        record = self._next_record(status=status, **fields)
        event = self._event(record, EventKind.SAGA, status, self.status, actor=actor)
        self._commit(record, None, event)
        self._record = record
        if status.ended:
            # A resting saga needs no owner: let another process (a dashboard,
            # an operator's tool) attach to it at once to retry or resolve.
            try:
                self._store.release_lease(self.id, self._owner)
                self._record = record._replace(lease_owner=None, lease_expires_at=None)
            except StoreError:
                log.warning("could not release the lease of saga %s", self.id, exc_info=True)

    def _step_to(
        self,
        step: StepRow,
        state: StepState,
        *,
        actor: str | None = None,
        happened: bool = False,
        detail: str | None = None,
        **fields: Any,
    ) -> None:
        """Move one step; ``happened=True`` when the world already changed (see module doc)."""
        check_step_transition(step.state, state, step_id=step.id)
        previous = {name: getattr(step, name) for name in fields} if fields else None
        before, before_completed = step.state, step.completed_at
        stored = step.snapshot()
        record = self._next_record()
        now = record.updated_at
        step.state, step.updated_at = state, now
        if state is StepState.COMPLETED:
            step.completed_at = now
        for name, value in fields.items():
            setattr(step, name, value)
        event = self._event(record, EventKind.STEP, state, before, step, actor=actor, detail=detail)
        try:
            self._commit(record, step, event, stored)
        except StoreError as err:
            if not (happened or step.unpersisted):
                step.state, step.completed_at = before, before_completed
                for name, value in (previous or {}).items():
                    setattr(step, name, value)
                raise
            # The world changed (or this step can no longer be stored, e.g. its
            # output is not JSON): keep going in memory so the rollback still
            # undoes it, and raise the store error when the operation ends.
            step.unpersisted = True
            self._pending_store_error = self._pending_store_error or err
        self._record = record

    def _attempt_event(self, step: StepRow, attempt: CompensationAttempt) -> None:
        """Record a failed undo attempt that will be retried (the step stays COMPENSATING)."""
        stored = step.snapshot()
        step.attempts = (*step.attempts, attempt)
        record = self._next_record()
        event = self._event(
            record,
            EventKind.ATTEMPT,
            step.state,
            step.state,
            step,
            actor=attempt.actor,
            detail=attempt.error,
        )
        try:
            self._commit(record, step, event, stored)
        except StoreError as err:
            self._pending_store_error = self._pending_store_error or err
        self._record = record

    def _abandon(self) -> None:
        """An error escaped mid-flow (a crash, Ctrl-C, a store outage): free the saga.

        Its flow is gone, so nobody in this process will finish it; releasing the
        lease lets ``recover()`` or ``resume()`` take it over at once.
        """
        if not self.status.ended:  # an ended saga released its lease when it came to rest
            self._abandon_lease()

    def _abandon_lease(self) -> None:
        try:
            self._store.release_lease(self.id, self._owner)
        except Exception:
            log.warning("could not release the lease of saga %s", self.id, exc_info=True)

    def _raise_pending_store_error(self) -> None:
        err, self._pending_store_error = self._pending_store_error, None
        if err is not None:
            raise err

    # ------------------------------------------------------------ steps

    def start(self) -> None:
        """Write the saga to its store now (otherwise it is written with its first step).

        Lets a saga that has no step yet be seen, listed and attached to elsewhere.
        """
        if self._started:
            return
        record = self._next_record()
        self._commit(record, None, self._event(record, EventKind.SAGA, record.status, None))
        self._record = record
        self._started = True

    def _step_row(
        self, tool: Tool, input: Any, step_id: str, state: StepState, now: datetime
    ) -> StepRow:
        return StepRow(
            id=step_id,
            position=len(self._steps),
            tool_name=tool.name,
            tool=tool,
            input=input,
            state=state,
            created_at=now,
            updated_at=now,
            has_undo=tool.has_undo,
            requires_approval=tool.requires_approval,
            reversibility=tool.reversibility.value,
            idempotency_key=f"{self.id}:{step_id}",
        )

    def _new_step(
        self,
        tool: Tool,
        input: Any,
        *,
        step_id: str | None = None,
        requires_approval: bool | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> StepRow:
        """Create a step and persist it as PENDING before anything runs."""
        if tool.is_async and not self._async:
            raise TypeError(
                f"tool {tool.name!r} is async: use AsyncSaga (Saga runs plain functions only)"
            )
        number = self._record.next_step_number
        sid = step_id or f"step-{number}"
        if sid in self._by_id:
            raise ValueError(f"saga {self.name!r} already has a step {sid!r}")
        self.start()
        record = self._next_record(next_step_number=number + 1)
        step = self._step_row(tool, input, sid, StepState.PENDING, record.updated_at)
        if requires_approval is not None:
            step.requires_approval = bool(requires_approval)
        step.metadata = dict(metadata) if metadata else {}
        self._commit(record, step, self._event(record, EventKind.STEP, step.state, None, step))
        self._record = record
        self._steps.append(step)
        self._by_id[sid] = step
        return step

    def _complete_step(self, step: StepRow, output: Any, *, happened: bool) -> None:
        self._step_to(
            step,
            StepState.COMPLETED,
            happened=happened,
            output=output,
        )

    def _fail_step(self, step: StepRow, error: BaseException | str) -> None:
        message, kind, trace = describe(error)
        self._step_to(
            step,
            StepState.FAILED,
            happened=True,
            error=message,
            error_type=kind,
            traceback=trace,
            detail=message,
        )

    # ------------------------------------------------------------ flows

    def _execute_flow(
        self, tool: Tool, input: Any, *, step_id: str | None = None, metadata: Any = None
    ) -> Flow[Any]:
        tool = self._check_tool(tool)
        self._require_open("execute")
        try:
            resumed = self._by_id.get(step_id) if step_id is not None else None
            if resumed is not None and resumed.state is StepState.PENDING:
                step = resumed  # resuming a step its process died in: run it again
            else:
                step = self._new_step(tool, input, step_id=step_id, metadata=metadata)
        except StoreError as err:
            # The PENDING write failed: the tool does not run, and the step fails.
            step = self._unpersisted_failed_step(tool, input, err, step_id)
            return (yield from self._after_failure(step, err))
        if tool.execute_takes_context:
            args: tuple[Any, ...] = (
                input,
                ExecuteContext(self.id, step.id, step.idempotency_key, dict(step.metadata)),
            )
        else:
            args = (input,)
        outcome = yield Call(tool.execute, args, tool.execute_timeout, f"{tool.name}.execute")
        assert outcome is not None
        if outcome.error is None:
            self._complete_step(step, outcome.value, happened=True)
            if self._pending_store_error is None:
                return outcome.value
            # The effect happened but could not be recorded: fail, and undo it too.
            error: BaseException = self._pending_store_error
            self._pending_store_error = None
        else:
            error = outcome.error
            self._fail_step(step, error)
        return (yield from self._after_failure(step, error))

    def _unpersisted_failed_step(
        self, tool: Tool, input: Any, error: StoreError, step_id: str | None
    ) -> StepRow:
        number = self._record.next_step_number
        self._record = self._record._replace(next_step_number=number + 1)
        step = self._step_row(
            tool, input, step_id or f"step-{number}", StepState.FAILED, self._clock.now()
        )
        step.error, step.error_type, step.traceback = describe(error)
        self._steps.append(step)
        self._by_id[step.id] = step
        return step

    def _after_failure(self, step: StepRow, error: BaseException) -> Flow[Any]:
        if not self.auto_rollback_on_failure:
            self._saga_to(SagaStatus.FAILED, failed_step=step.id)
            raise error
        self._record = self._record._replace(failed_step=step.id)
        report = yield from self._rollback_flow(None, raise_store_errors=False)
        raise self._rollback_error(report, step, error)

    def _rollback_flow(
        self, actor: str | None, *, resume: bool = False, raise_store_errors: bool = True
    ) -> Flow[RollbackReport]:
        if resume:
            if self.status is SagaStatus.ROLLED_BACK:
                return self.report()
            if self.status not in (SagaStatus.ROLLBACK_FAILED, SagaStatus.COMPENSATING):
                raise TransitionError(
                    f"saga {self.name!r}",
                    self.status,
                    SagaStatus.COMPENSATING,
                    "only a saga whose rollback stopped can resume it; call rollback()",
                )
        elif self.status in (SagaStatus.ROLLED_BACK, SagaStatus.ROLLBACK_FAILED):
            return self.report()  # a second rollback() is a no-op
        elif self.status is SagaStatus.COMPENSATING:
            raise TransitionError(
                f"saga {self.name!r}", self.status, SagaStatus.COMPENSATING, "already rolling back"
            )
        self.start()
        for step in self._steps:
            if step.state is StepState.PENDING:
                self._step_to(
                    step,
                    StepState.FAILED,
                    actor=actor,
                    error="never marked completed before the rollback; treated as not executed",
                )
        if self.status is not SagaStatus.COMPENSATING:
            self._saga_to(SagaStatus.COMPENSATING, actor=actor)
        halt = self.on_compensation_failure == "halt"
        for step in reversed(self._steps):
            result = yield from self._compensate(step, actor)
            if result == StepRowOutcome.WAITING:
                # Paused for a decision, in either mode: undoing older steps first would
                # break LIFO order. Stays COMPENSATING; resume_rollback() goes on.
                if raise_store_errors:
                    self._raise_pending_store_error()
                return self.report()
            if halt and result in (StepRowOutcome.FAILED, StepRowOutcome.LEFT):
                break
        self._settle(actor)
        if raise_store_errors:
            self._raise_pending_store_error()
        return self.report()

    def _settle(self, actor: str | None) -> None:
        """End a rollback: ROLLED_BACK if nothing is left for a human, else ROLLBACK_FAILED."""
        if self.status is SagaStatus.COMPENSATING:
            left = any(self._unsettled(s) for s in self._steps)
            self._saga_to(
                SagaStatus.ROLLBACK_FAILED if left else SagaStatus.ROLLED_BACK, actor=actor
            )
        elif self.status is SagaStatus.ROLLBACK_FAILED and not any(
            self._unsettled(s) for s in self._steps
        ):
            self._saga_to(SagaStatus.ROLLED_BACK, actor=actor)

    def _approval_reason(self, step: StepRow) -> str | None:
        if step.tool is not None and step.tool.requires_approval:
            return f"tool {step.tool_name!r} requires approval before its undo runs"
        if step.requires_approval:
            return "the step was registered as needing approval"
        if self._approval_policy is not None and self._approval_policy(step.snapshot()):
            return "the saga's approval policy matched this step"
        return None

    def _compensate(self, step: StepRow, actor: str | None) -> Flow[str]:
        """Compensate one step, whatever state the rollback finds it in."""
        state = step.state
        if state in SETTLED_STEP_STATES or state is StepState.PENDING:
            return StepRowOutcome.DONE
        if state is StepState.COMPLETED and not step.has_undo:
            return StepRowOutcome.DONE  # nothing to undo: reported as skipped
        if state is StepState.IN_DOUBT:
            return StepRowOutcome.LEFT
        if state is StepState.ROLLBACK_FAILED:
            return (yield from self._handle_failure(step, actor))
        why: str | None = None
        if state is StepState.COMPLETED:
            why = self._approval_reason(step)
            if why is None and hasattr(self._gate, "approval_needed"):
                asked = yield Ask(
                    "approval_needed", ApprovalRequest(self.id, self.name, step.snapshot(), "")
                )
                assert asked is not None
                if asked.error is not None:
                    # Could not learn whether a person must decide: do not run it unattended.
                    log.warning(
                        "gate could not say if %s/%s needs approval: %r",
                        self.id,
                        step.id,
                        asked.error,
                    )
                    return StepRowOutcome.WAITING
                why = str(asked.value) if asked.value else None
            if why is not None:
                self._step_to(step, StepState.AWAITING_APPROVAL, actor=actor, detail=why)
        if step.state is StepState.AWAITING_APPROVAL:
            why = why or self._approval_reason(step) or "awaiting approval"
            request = ApprovalRequest(self.id, self.name, step.snapshot(), why)
            outcome = yield Ask("approve_compensation", request)
            assert outcome is not None
            if outcome.error is not None:
                log.warning("approval gate failed for %s/%s: %r", self.id, step.id, outcome.error)
                return StepRowOutcome.LEFT
            decision = self._decision(
                outcome.value, DecisionAction.APPROVE, DecisionAction.REJECT, DecisionAction.WAIT
            )
            if decision.action is DecisionAction.WAIT:
                return StepRowOutcome.WAITING
            if decision.action is DecisionAction.REJECT:
                self._step_to(
                    step,
                    StepState.REJECTED,
                    actor=decision.actor,
                    decision_note=decision.reason,
                    decided_by=decision.actor,
                    detail=decision.reason,
                )
                return StepRowOutcome.DONE
            actor = decision.actor or actor
            self._step_to(
                step,
                StepState.COMPENSATING,
                actor=actor,
                decided_by=decision.actor,
                decision_note=decision.reason,
                detail="approved",
            )
        if (yield from self._run_undo(step, actor)):
            return StepRowOutcome.ROLLED_BACK
        return (yield from self._handle_failure(step, actor))

    def _handle_failure(self, step: StepRow, actor: str | None) -> Flow[str]:
        """An undo failed: under "halt" ask the gate (retry, resolve, leave); else move on."""
        while self.on_compensation_failure == "halt":
            request = FailedCompensation(
                self.id, self.name, step.snapshot(), step.error or "", len(step.attempts)
            )
            outcome = yield Ask("compensation_failed", request)
            assert outcome is not None
            if outcome.error is not None:
                log.warning("gate failed on %s/%s: %r", self.id, step.id, outcome.error)
                return StepRowOutcome.LEFT
            decision = self._decision(
                outcome.value, DecisionAction.RETRY, DecisionAction.RESOLVE, DecisionAction.LEAVE
            )
            if decision.action is DecisionAction.RESOLVE:
                self._resolve(step, decision.reason or "", decision.actor)
                return StepRowOutcome.DONE
            if decision.action is DecisionAction.LEAVE:
                return StepRowOutcome.LEFT
            if (yield from self._run_undo(step, decision.actor or actor)):
                return StepRowOutcome.ROLLED_BACK
        return StepRowOutcome.FAILED

    def _decision(self, value: Any, *allowed: DecisionAction) -> Decision:
        if not isinstance(value, Decision) or value.action not in allowed:
            names = ", ".join(a.name for a in allowed)
            raise GateError(f"the gate must answer a Decision of {names}; got {value!r}")
        return value

    def _run_undo(self, step: StepRow, actor: str | None) -> Flow[bool]:
        """Run a step's undo under its retry policy; ends ROLLED_BACK or ROLLBACK_FAILED."""
        if step.state is not StepState.COMPENSATING:
            self._step_to(step, StepState.COMPENSATING, actor=actor)
        tool = step.tool
        if tool is None or tool.undo is None:
            message = (
                f"tool {step.tool_name!r} is not registered in this process, so its undo cannot run"
                if tool is None
                else f"tool {step.tool_name!r} has no undo"
            )
            self._undo_failed(step, LookupError(message), self._clock.now(), actor, timed_out=False)
            return False
        policy = tool.undo_retry
        tries = 0
        while True:
            tries += 1
            number = len(step.attempts) + 1
            if tool.undo_arity == 3:
                ctx = UndoContext(self.id, step.id, step.idempotency_key, number, actor)
                args: tuple[Any, ...] = (step.output, step.input, ctx)
            else:
                args = (step.output, step.input)[: tool.undo_arity]
            started = self._clock.now()
            outcome = yield Call(tool.undo, args, tool.undo_timeout, f"{tool.name}.undo")
            assert outcome is not None
            if outcome.error is None:
                attempt = CompensationAttempt(
                    number, started, self._clock.now(), AttemptOutcome.SUCCEEDED, None, actor
                )
                self._step_to(
                    step,
                    StepState.ROLLED_BACK,
                    actor=actor,
                    happened=True,
                    attempts=(*step.attempts, attempt),
                )
                return True
            error = outcome.error
            timed_out = isinstance(error, TimeoutError)
            if not policy.should_retry(error, tries):
                self._undo_failed(step, error, started, actor, timed_out=timed_out)
                return False
            self._attempt_event(
                step,
                CompensationAttempt(
                    number,
                    started,
                    self._clock.now(),
                    AttemptOutcome.TIMED_OUT if timed_out else AttemptOutcome.FAILED,
                    describe(error)[0],
                    actor,
                ),
            )
            yield Sleep(policy.delay(tries))

    def _undo_failed(
        self,
        step: StepRow,
        error: BaseException,
        started: datetime,
        actor: str | None,
        *,
        timed_out: bool,
    ) -> None:
        message, kind, trace = describe(error)
        attempt = CompensationAttempt(
            len(step.attempts) + 1,
            started,
            self._clock.now(),
            AttemptOutcome.TIMED_OUT if timed_out else AttemptOutcome.FAILED,
            message,
            actor,
        )
        if self._first_comp_error is None:
            self._first_comp_error = (error, step)
        self._step_to(
            step,
            StepState.ROLLBACK_FAILED,
            actor=actor,
            happened=True,
            attempts=(*step.attempts, attempt),
            error=message,
            error_type=kind,
            traceback=trace,
            detail=message,
        )

    def _resolve(self, step: StepRow, note: str, actor: str | None) -> None:
        if not note or not note.strip():
            raise ValueError("resolve() needs a note saying how the side effect was handled")
        self._step_to(
            step,
            StepState.RESOLVED,
            actor=actor,
            decision_note=note,
            decided_by=actor,
            detail=note,
        )

    def _human_step(self, step_id: str, action: str) -> StepRow:
        step = self._get(step_id)
        if self.status not in (SagaStatus.ROLLBACK_FAILED, SagaStatus.COMPENSATING):
            raise TransitionError(
                f"saga {self.name!r}",
                self.status,
                SagaStatus.COMPENSATING,
                f"{action} applies to a saga whose rollback failed",
            )
        if step.state not in (StepState.ROLLBACK_FAILED, StepState.IN_DOUBT):
            raise TransitionError(
                f"step {step.id!r}",
                step.state,
                StepState.COMPENSATING,
                f"{action} applies to a ROLLBACK_FAILED or IN_DOUBT step",
            )
        return step

    def _retry_flow(self, step_id: str, actor: str | None) -> Flow[StepSnapshot]:
        step = self._human_step(step_id, "retry_compensation")
        yield from self._run_undo(step, actor or self._actor)
        self._settle(actor)
        self._raise_pending_store_error()
        return step.snapshot()

    # ------------------------------------------------------------ manual flow (sync parts)

    def add_step(
        self,
        tool: Tool,
        input: Any = None,
        *,
        requires_approval: bool | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Register a step without running it (agent-undo's ``addStep``); returns its id."""
        tool = self._check_tool(tool)
        self._require_open("add_step")
        return self._new_step(
            tool, input, requires_approval=requires_approval, metadata=metadata
        ).id

    def mark_completed(self, step_id: str, output: Any = None) -> None:
        """A registered step ran: record its output (it will be undone on rollback)."""
        step = self._get(step_id)
        self._require_open("mark_completed")
        self._complete_step(step, output, happened=False)

    def mark_failed(self, step_id: str, error: BaseException | str) -> None:
        """A registered step failed; the saga stays open (call ``rollback()`` to undo)."""
        step = self._get(step_id)
        self._require_open("mark_failed")
        check_step_transition(step.state, StepState.FAILED, step_id=step.id)
        self._fail_step(step, error)
        self._raise_pending_store_error()

    def complete(self) -> None:
        """Finish the saga successfully: COMPLETED (nothing is undone)."""
        pending = [s.id for s in self._steps if s.state is StepState.PENDING]
        if pending and self.status is SagaStatus.IN_PROGRESS:
            raise TransitionError(
                f"saga {self.name!r}",
                self.status,
                SagaStatus.COMPLETED,
                f"steps {', '.join(pending)} are still PENDING: mark them completed or failed",
            )
        self.start()
        self._saga_to(SagaStatus.COMPLETED)

    def begin_rollback(self, *, actor: str | None = None) -> None:
        """Mark the saga COMPENSATING without running any undo yet.

        For undos that run elsewhere (a worker): steps never marked completed
        are failed, as in any rollback, and ``resume_rollback()`` later runs the
        compensations from this state.
        """
        if self.status not in (SagaStatus.IN_PROGRESS, SagaStatus.FAILED, SagaStatus.COMPLETED):
            raise TransitionError(
                f"saga {self.name!r}", self.status, SagaStatus.COMPENSATING, "nothing to roll back"
            )
        self.start()
        for step in self._steps:
            if step.state is StepState.PENDING:
                self._fail_step(step, "never marked completed before the rollback")
        self._saga_to(SagaStatus.COMPENSATING, actor=actor)

    def release(self) -> None:
        """Let go of the saga's lease, so another process may attach to it at once."""
        self._abandon_lease()

    def resolve(self, step_id: str, note: str, *, actor: str | None = None) -> StepSnapshot:
        """A human handled a failed (or in-doubt) undo by hand: the step becomes RESOLVED."""
        step = self._human_step(step_id, "resolve")
        self._resolve(step, note, actor or self._actor)
        self._settle(actor)
        return step.snapshot()

    # ------------------------------------------------------------ errors

    def _rollback_error(
        self, report: RollbackReport, failed: StepRow, cause: BaseException
    ) -> SagaRollbackError:
        comp = self._first_comp_error
        message = rollback_message(self._by_id, report, failed)
        unsaved, self._pending_store_error = self._pending_store_error, None
        if unsaved is not None and str(unsaved) != str(cause):
            message += f" Some of this could not be saved to the store: {unsaved}"
        return SagaRollbackError(
            message,
            saga_id=self.id,
            saga_name=self.name,
            status=self.status,
            cause=cause,
            failed_step=failed.id,
            failed_step_name=failed.tool_name,
            compensation_cause=comp[0] if comp else None,
            failed_comp_step_name=comp[1].tool_name if comp else None,
            failed_comp_step=comp[1].id if comp else None,
            rolled_back=report.rolled_back,
            failed=report.failed,
            skipped=report.skipped,
            rejected=report.rejected,
            unresolved=report.unresolved,
        )

    # ------------------------------------------------------------ restore

    @classmethod
    def restore(
        cls,
        store: SagaStore,
        saga_id: str,
        tools: Mapping[str, Tool],
        *,
        owner: str | None = None,
        **options: Any,
    ) -> Self:
        """Rebuild a saga from its store, to retry or resolve it from another process.

        Takes the saga's lease; see :func:`undo_core.recovery.attach`.
        """
        from .recovery import attach

        return attach(cls, store, saga_id, tools, owner=owner, **options)

    @classmethod
    def _restored(
        cls,
        snapshot: SagaSnapshot,
        tools: Mapping[str, Tool],
        *,
        store: SagaStore,
        owner: str,
        **options: Any,
    ) -> Any:
        opts = snapshot.record.options
        saga = cls(
            snapshot.record.name,
            auto_rollback_on_failure=opts.get("auto_rollback_on_failure", True),
            on_compensation_failure=opts.get("on_compensation_failure", "continue"),
            store=store,
            saga_id=snapshot.record.id,
            owner=owner,
            **options,
        )
        saga._record = snapshot.record._replace(lease_owner=owner)
        saga._started = True
        for snap in snapshot.steps:
            step = StepRow.restore(snap, tools.get(snap.tool_name))
            saga._steps.append(step)
            saga._by_id[step.id] = step
        return saga

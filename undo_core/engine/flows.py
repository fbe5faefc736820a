"""The saga's algorithms, written once for both :class:`Saga` and :class:`AsyncSaga`.

Run a step forward, roll back newest first (LIFO), run an undo under its retry
policy, ask the gate, finish what a dead process left: each is a generator that
*yields effects* (call this function, ask the gate, sleep) and receives their
outcomes. The sync and async sagas differ only in how they perform an effect,
so the rules live here, in one place, and every change they make goes through
the saga's :class:`~undo_core.engine.ledger.Ledger`.

A change that records something the world already did may fail to reach the
store; the ledger then hands back the error in a
:class:`~undo_core.engine.ledger.Recorded`, and each algorithm returns it to its
caller in its own result (:class:`StepResult`, :class:`RollbackRun`), up to
the operation that raises or reports it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from ..stores.storage import RollbackRequest
from ..tracing import METADATA_KEY, SagaTrace
from ..vocabulary.errors import (
    GateError,
    RollbackRequestedError,
    SagaClosedError,
    StoreError,
    TransitionError,
)
from ..vocabulary.gates import (
    APPROVAL_DECISIONS,
    STEP_ACTIONS,
    ApprovalPolicy,
    ApprovalRequest,
    Decision,
    DecisionAction,
    FailedCompensation,
    GateQuestions,
)
from ..vocabulary.records import AttemptOutcome, CompensationAttempt, SagaRecord, StepSnapshot
from ..vocabulary.states import SETTLED_STEP_STATES, SagaStatus, StepState, check_step_transition
from ..vocabulary.tools import ExecuteContext, Tool, UndoContext
from .effects import Ask, Call, Flow, Sleep
from .ledger import SAVED, Ledger, Recorded
from .reports import RollbackReport, rollback_error, rollback_fields
from .steps import StepRow, describe

__all__ = [
    "CompensationFailureMode",
    "CompensationOutcome",
    "Flows",
    "RollbackRun",
    "StepResult",
    "check_tool",
]

log = logging.getLogger("undo_core")

CompensationFailureMode = Literal["continue", "halt"]

# Effects and attempts made on every step are built positionally (a keyword call of a
# named tuple costs three times as much); the field orders are pinned here.
_tuple = tuple.__new__
assert Call._fields == ("fn", "args", "timeout", "what", "span")
assert CompensationAttempt._fields == (
    "number", "started_at", "finished_at", "outcome", "error", "actor",
)  # fmt: skip


def check_tool(tool: object) -> Tool:
    """``tool`` itself, once it is known to be a :class:`Tool`."""
    if not isinstance(tool, Tool):
        raise TypeError(f"expected a Tool from define_tool(), got {type(tool).__name__}")
    return tool


class CompensationOutcome(StrEnum):
    """Where compensating one step left the rollback."""

    ROLLED_BACK = "rolled_back"
    """Its undo ran."""
    FAILED = "failed"
    """Its undo failed (under "halt", the cascade stops here)."""
    LEFT = "left"
    """Left for a human: in doubt, the gate failed or said LEAVE (under "halt", it stops)."""
    DONE = "done"
    """Nothing more to do here: settled, no undo, rejected or resolved."""
    WAITING = "waiting"
    """Paused for a decision: the rollback stops here and the saga stays COMPENSATING."""


@dataclass(frozen=True, slots=True)
class StepResult:
    """What compensating one step did: its outcome, what the store refused, why the undo failed."""

    outcome: CompensationOutcome
    unsaved: StoreError | None = None
    undo_error: BaseException | None = None
    """The first error an undo of this step ended on (it stayed ROLLBACK_FAILED)."""

    def with_recorded(self, recorded: Recorded) -> StepResult:
        """This result after the earlier changes in ``recorded``: the earlier store error wins."""
        if recorded.unsaved is None or recorded.unsaved is self.unsaved:
            return self
        return StepResult(
            outcome=self.outcome, unsaved=recorded.unsaved, undo_error=self.undo_error
        )


_PLAIN = {outcome: StepResult(outcome=outcome) for outcome in CompensationOutcome}
"""A result with nothing to report, for each outcome (shared: the common case is free)."""


@dataclass(frozen=True, slots=True)
class RollbackRun:
    """What one rollback (or resume) did, for the operation that ran it."""

    report: RollbackReport
    unsaved: StoreError | None = None
    """The first change the store refused along the way (memory moved on without it)."""
    undo_failure: tuple[BaseException, StepRow] | None = None
    """The first undo that failed, and its step."""


class Flows:
    """The algorithms of one saga, over its ledger, asking its gate."""

    trace: SagaTrace | None = None
    """Its OpenTelemetry spans, when the process has a tracer (``undo_core.tracing``)."""

    def __init__(
        self,
        ledger: Ledger,
        gate: GateQuestions,
        *,
        auto_rollback_on_failure: bool,
        on_compensation_failure: CompensationFailureMode,
        approval_policy: ApprovalPolicy | None,
        runs_async: bool,
    ) -> None:
        self.ledger = ledger
        self.gate = gate
        self.auto_rollback_on_failure = auto_rollback_on_failure
        self.on_compensation_failure: CompensationFailureMode = on_compensation_failure
        self.approval_policy = approval_policy
        self.runs_async = runs_async
        # Asked at every step boundary; resolved once (most stores have none).
        self._requested: Callable[[str], RollbackRequest | None] | None = getattr(
            ledger.store, "rollback_requested", None
        )

    # ------------------------------------------------------------ reads

    def report(self) -> RollbackReport:
        """Where every step stands now, as a rollback would report it."""
        ledger = self.ledger
        newest_first = list(reversed(ledger.steps))

        def ids(*states: StepState) -> tuple[str, ...]:
            return tuple(s.id for s in newest_first if s.state in states)

        return RollbackReport(
            status=ledger.record.status,
            rolled_back=ids(StepState.ROLLED_BACK),
            failed=ids(StepState.ROLLBACK_FAILED),
            skipped=tuple(
                s.id for s in newest_first if s.state is StepState.COMPLETED and not s.has_undo
            ),
            rejected=ids(StepState.REJECTED),
            resolved=ids(StepState.RESOLVED),
            in_doubt=ids(StepState.IN_DOUBT),
            unresolved=tuple(s.id for s in newest_first if ledger.unsettled(s)),
        )

    def require_open(self, action: str) -> None:
        """Refuse forward work once the saga has ended."""
        if self.ledger.record.status is not SagaStatus.IN_PROGRESS:
            raise SagaClosedError(
                f"saga {self.ledger.record.name!r}",
                self.ledger.record.status,
                SagaStatus.IN_PROGRESS,
                f"it has ended, so {action} is refused (the tool was not called)",
            )

    # ------------------------------------------------------------ forward

    def add_step(
        self,
        tool: Tool,
        input: Any,
        *,
        step_id: str | None = None,
        requires_approval: bool | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> StepRow:
        """Persist a new PENDING step, for a tool this saga can run."""
        if tool.is_async and not self.runs_async:
            raise TypeError(
                f"tool {tool.name!r} is async: use AsyncSaga (Saga runs plain functions only)"
            )
        return self.ledger.add_step(
            tool, input, step_id=step_id, requires_approval=requires_approval, metadata=metadata
        )

    def complete_step(self, step: StepRow, output: Any, *, happened: bool) -> Recorded:
        return self.ledger.step_to(step, StepState.COMPLETED, happened=happened, output=output)

    def fail_step(self, step: StepRow, error: BaseException | str) -> Recorded:
        message, kind, trace = describe(error)
        return self.ledger.step_to(
            step,
            StepState.FAILED,
            happened=True,
            error=message,
            error_type=kind,
            traceback=trace,
            detail=message,
        )

    def execute(
        self,
        tool: Tool,
        input: Any,
        *,
        step_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Flow[Any]:
        """Run ``tool`` as a step and return its output (a PENDING ``step_id`` runs again)."""
        if not isinstance(tool, Tool):
            check_tool(tool)
        ledger = self.ledger
        if ledger.record.status is not SagaStatus.IN_PROGRESS:
            self.require_open("execute")
        if self._requested is not None:
            request = self._requested(ledger.record.id)
            if request is not None:
                return (yield from self._requested_rollback(request))
        trace, span = self.trace, None
        if trace is not None:
            span = trace.step(tool.name, step_id, metadata or {}, input)
            traceparent = trace.traceparent(span)
            if traceparent is not None:  # kept on the step: its undo joins this trace
                metadata = {**(metadata or {}), METADATA_KEY: traceparent}
        try:
            resumed = ledger.by_id.get(step_id) if step_id is not None else None
            if resumed is not None and resumed.state is StepState.PENDING:
                step = resumed  # resuming a step its process died in: run it again
            else:
                step = self.add_step(tool, input, step_id=step_id, metadata=metadata)
        except StoreError as err:
            # The PENDING write failed: the tool does not run, and the step fails.
            step = ledger.add_unsaved_failed_step(tool, input, err, step_id)
            if trace is not None:
                trace.finish(span, err)
            return (yield from self._after_failure(step, err, SAVED))
        if span is not None:
            span.set_attribute("undo_core.step.id", step.id)
        args = _execute_args(tool, ledger.record.id, step, input)
        outcome = yield _tuple(
            Call, (tool.execute, args, tool.execute_timeout, tool.execute_what, span)
        )
        assert outcome is not None
        if trace is not None:
            trace.finish(span, outcome.error, outcome.value)
        if outcome.error is None:
            recorded = self.complete_step(step, outcome.value, happened=True)
            if recorded.unsaved is None:
                return outcome.value
            # The effect happened but could not be recorded: fail, and undo it too.
            error: BaseException = recorded.unsaved
            recorded = SAVED
        else:
            error = outcome.error
            recorded = self.fail_step(step, error)
        return (yield from self._after_failure(step, error, recorded))

    def _after_failure(self, step: StepRow, error: BaseException, recorded: Recorded) -> Flow[Any]:
        """A step failed: roll back (the default) and raise the rollback's error, or fail."""
        ledger = self.ledger
        if not self.auto_rollback_on_failure:
            ledger.saga_to(SagaStatus.FAILED, failed_step=step.id)
            if recorded.unsaved is not None:
                error.add_note(
                    f"The step's failure could not be saved to the store: {recorded.unsaved}"
                )
            raise error
        ledger.note_failed_step(step.id)
        run = yield from self.rollback_run(None)
        unsaved = recorded.unsaved or run.unsaved
        raise rollback_error(
            ledger.record, ledger.by_id, run.report, step, error, unsaved, run.undo_failure
        )

    def _requested_rollback(self, request: RollbackRequest) -> Flow[Any]:
        """A person asked for the rollback: run it instead of the next step, then raise."""
        ledger = self.ledger
        actor = request.by or None
        run = yield from self.rollback_run(actor)
        record = ledger.record
        done = ", ".join(run.report.rolled_back) or "nothing"
        message = (
            f"Rollback of saga {record.name!r} requested by {request.by}"
            + (f": {request.reason}" if request.reason else "")
            + f". Rolled back (newest first): {done}; saga is {record.status}."
        )
        if run.unsaved is not None:
            message += f" Some of this could not be saved to the store: {run.unsaved}"
        raise RollbackRequestedError(
            message,
            requested_by=request.by,
            reason=request.reason,
            saga_id=record.id,
            saga_name=record.name,
            status=record.status,
            **rollback_fields(run.report, run.undo_failure),
        )

    # ------------------------------------------------------------ rollback

    def rollback(self, actor: str | None, *, resume: bool = False) -> Flow[RollbackReport]:
        """Roll back (or resume a stopped rollback); raises the first change it could not store."""
        run = yield from self.rollback_run(actor, resume=resume)
        if run.unsaved is not None:
            raise run.unsaved
        return run.report

    def rollback_run(self, actor: str | None, *, resume: bool = False) -> Flow[RollbackRun]:
        """Compensate every step newest first, from wherever each stands."""
        ledger = self.ledger
        status = ledger.record.status
        name = ledger.record.name
        if resume:
            if status is SagaStatus.ROLLED_BACK:
                return RollbackRun(report=self.report())
            if status not in (SagaStatus.ROLLBACK_FAILED, SagaStatus.COMPENSATING):
                raise TransitionError(
                    f"saga {name!r}",
                    status,
                    SagaStatus.COMPENSATING,
                    "only a saga whose rollback stopped can resume it; call rollback()",
                )
        elif status in (SagaStatus.ROLLED_BACK, SagaStatus.ROLLBACK_FAILED):
            return RollbackRun(report=self.report())  # a second rollback() is a no-op
        elif status is SagaStatus.COMPENSATING:
            raise TransitionError(
                f"saga {name!r}", status, SagaStatus.COMPENSATING, "already rolling back"
            )
        ledger.start()
        for step in ledger.steps:
            if step.state is StepState.PENDING:
                ledger.step_to(
                    step,
                    StepState.FAILED,
                    actor=actor,
                    error="never marked completed before the rollback; treated as not executed",
                )
        if ledger.record.status is not SagaStatus.COMPENSATING:
            ledger.saga_to(SagaStatus.COMPENSATING, actor=actor)
        halt = self.on_compensation_failure == "halt"
        unsaved: StoreError | None = None
        undo_failure: tuple[BaseException, StepRow] | None = None
        for step in reversed(ledger.steps):
            result = yield from self.compensate(step, actor)
            unsaved = unsaved or result.unsaved
            if undo_failure is None and result.undo_error is not None:
                undo_failure = (result.undo_error, step)
            if result.outcome is CompensationOutcome.WAITING:
                # Paused for a decision, in either mode: undoing older steps first would
                # break LIFO order. Stays COMPENSATING; resume_rollback() goes on.
                return RollbackRun(report=self.report(), unsaved=unsaved, undo_failure=undo_failure)
            if halt and result.outcome in (CompensationOutcome.FAILED, CompensationOutcome.LEFT):
                break
        self.settle(actor)
        return RollbackRun(report=self.report(), unsaved=unsaved, undo_failure=undo_failure)

    def settle(self, actor: str | None) -> None:
        """End a rollback: ROLLED_BACK if nothing is left for a human, else ROLLBACK_FAILED."""
        ledger = self.ledger
        if ledger.record.status is SagaStatus.COMPENSATING:
            left = any(ledger.unsettled(s) for s in ledger.steps)
            ledger.saga_to(
                SagaStatus.ROLLBACK_FAILED if left else SagaStatus.ROLLED_BACK, actor=actor
            )
        elif ledger.record.status is SagaStatus.ROLLBACK_FAILED and not any(
            ledger.unsettled(s) for s in ledger.steps
        ):
            ledger.saga_to(SagaStatus.ROLLED_BACK, actor=actor)

    def compensate(self, step: StepRow, actor: str | None) -> Flow[StepResult]:
        """Compensate one step, whatever state the rollback finds it in."""
        state = step.state
        if state in SETTLED_STEP_STATES or state is StepState.PENDING:
            return _PLAIN[CompensationOutcome.DONE]
        if state is StepState.COMPLETED and not step.has_undo:
            return _PLAIN[CompensationOutcome.DONE]  # nothing to undo: reported as skipped
        if state is StepState.IN_DOUBT:
            return _PLAIN[CompensationOutcome.LEFT]
        if state is StepState.ROLLBACK_FAILED:
            return (yield from self._handle_failure(step, actor))
        stop, recorded, why = yield from self._screen_for_approval(step, actor)
        if stop is None and step.state is StepState.AWAITING_APPROVAL:
            stop, recorded, actor = yield from self._ask_approval(step, actor, why, recorded)
        if stop is not None:
            return stop
        result = yield from self.run_undo(step, actor)
        if result.outcome is not CompensationOutcome.ROLLED_BACK:
            failed = yield from self._handle_failure(step, actor)
            result = _first(result, failed)
        return result.with_recorded(recorded)

    def _screen_for_approval(
        self, step: StepRow, actor: str | None
    ) -> Flow[tuple[StepResult | None, Recorded, str | None]]:
        """Before a COMPLETED step's undo: must a person approve it? Then AWAITING_APPROVAL.

        Returns ``(result, recorded, why)``: a ``result`` ends the step's compensation
        there (the gate could not say, so it waits); ``why`` is the reason to ask.
        """
        ledger = self.ledger
        recorded = SAVED
        why: str | None = None
        if step.state is StepState.COMPLETED:
            why = _approval_reason(step, self.approval_policy)
            if why is None and self.gate.approval_needed is not None:
                asked = yield Ask(
                    question=self.gate.approval_needed,
                    request=_approval_request(ledger.record, step, ""),
                )
                assert asked is not None
                if asked.error is not None:
                    # Could not learn whether a person must decide: do not run it unattended.
                    log.warning(
                        "gate could not say if %s/%s needs approval: %r",
                        ledger.record.id,
                        step.id,
                        asked.error,
                    )
                    return _PLAIN[CompensationOutcome.WAITING], recorded, why
                why = str(asked.value) if asked.value else None
            if why is not None:
                recorded = ledger.step_to(
                    step, StepState.AWAITING_APPROVAL, actor=actor, detail=why
                )
        return None, recorded, why

    def _ask_approval(
        self, step: StepRow, actor: str | None, why: str | None, recorded: Recorded
    ) -> Flow[tuple[StepResult | None, Recorded, str | None]]:
        """Ask the gate whether an AWAITING_APPROVAL undo may run; approved, it is COMPENSATING.

        Returns ``(result, recorded, actor)``: a ``result`` ends the step's compensation
        there (rejected, waiting, or the gate failed); else ``actor`` runs the undo.
        """
        ledger = self.ledger
        why = why or _approval_reason(step, self.approval_policy) or "awaiting approval"
        outcome = yield Ask(
            question=self.gate.approve_compensation,
            request=_approval_request(ledger.record, step, why),
        )
        assert outcome is not None
        if outcome.error is not None:
            log.warning(
                "approval gate failed for %s/%s: %r", ledger.record.id, step.id, outcome.error
            )
            return _PLAIN[CompensationOutcome.LEFT].with_recorded(recorded), recorded, actor
        decision = _checked_decision(outcome.value, *APPROVAL_DECISIONS, DecisionAction.WAIT)
        if decision.action is DecisionAction.WAIT:
            return _PLAIN[CompensationOutcome.WAITING].with_recorded(recorded), recorded, actor
        if decision.action is DecisionAction.REJECT:
            recorded = recorded.then(
                ledger.step_to(
                    step,
                    StepState.REJECTED,
                    actor=decision.actor,
                    decision_note=decision.reason,
                    decided_by=decision.actor,
                    detail=decision.reason,
                )
            )
            return _PLAIN[CompensationOutcome.DONE].with_recorded(recorded), recorded, actor
        actor = decision.actor or actor
        recorded = recorded.then(
            ledger.step_to(
                step,
                StepState.COMPENSATING,
                actor=actor,
                decided_by=decision.actor,
                decision_note=decision.reason,
                detail="approved",
            )
        )
        return None, recorded, actor

    def _handle_failure(self, step: StepRow, actor: str | None) -> Flow[StepResult]:
        """An undo failed: under "halt" ask the gate (retry, resolve, leave); else move on."""
        ledger = self.ledger
        result = _PLAIN[CompensationOutcome.FAILED]
        while self.on_compensation_failure == "halt":
            record = ledger.record
            request = FailedCompensation(
                saga_id=record.id,
                saga_name=record.name,
                step=step.snapshot(),
                error=step.error or "",
                attempts=len(step.compensation_attempts),
            )
            outcome = yield Ask(question=self.gate.compensation_failed, request=request)
            assert outcome is not None
            if outcome.error is not None:
                log.warning("gate failed on %s/%s: %r", record.id, step.id, outcome.error)
                return _first(result, _PLAIN[CompensationOutcome.LEFT])
            decision = _checked_decision(outcome.value, *STEP_ACTIONS)
            if decision.action is DecisionAction.RESOLVE:
                self.resolve_step(step, decision.reason or "", decision.actor)
                return _first(result, _PLAIN[CompensationOutcome.DONE])
            if decision.action is DecisionAction.LEAVE:
                return _first(result, _PLAIN[CompensationOutcome.LEFT])
            retried = yield from self.run_undo(step, decision.actor or actor)
            result = _first(result, retried)
            if retried.outcome is CompensationOutcome.ROLLED_BACK:
                return result
        return result

    def run_undo(self, step: StepRow, actor: str | None) -> Flow[StepResult]:
        """Run a step's undo under its retry policy; ends ROLLED_BACK or ROLLBACK_FAILED."""
        ledger = self.ledger
        clock = ledger.clock
        recorded = SAVED
        if step.state is not StepState.COMPENSATING:
            recorded = ledger.step_to(step, StepState.COMPENSATING, actor=actor)
        tool = step.tool
        if tool is None or tool.undo is None:
            if tool is None:
                message = (
                    f"tool {step.tool_name!r} is not registered in this process, "
                    "so its undo cannot run"
                )
            else:
                message = tool.undo_elsewhere or f"tool {step.tool_name!r} has no undo"
            error: BaseException = LookupError(message)
            failed = self._undo_failed(step, error, clock.now(), actor, timed_out=False)
            return StepResult(
                outcome=CompensationOutcome.FAILED,
                unsaved=recorded.then(failed).unsaved,
                undo_error=error,
            )
        return (yield from self._undo_attempts(step, tool, tool.undo, actor, recorded))

    def _undo_attempts(
        self,
        step: StepRow,
        tool: Tool,
        undo: Callable[..., Any],
        actor: str | None,
        recorded: Recorded,
    ) -> Flow[StepResult]:
        """Call ``undo`` until it succeeds or its retry policy gives up (each try an attempt)."""
        ledger = self.ledger
        clock = ledger.clock
        policy = tool.undo_retry
        tries = 0
        while True:
            tries += 1
            number = len(step.compensation_attempts) + 1
            args = _undo_args(tool, ledger.record.id, step, number, actor)
            started = clock.now()
            trace = self.trace
            span = None if trace is None else trace.undo(tool.name, step.id, step.metadata, number)
            outcome = yield _tuple(Call, (undo, args, tool.undo_timeout, tool.undo_what, span))
            assert outcome is not None
            if trace is not None:
                trace.finish(span, outcome.error)
            if outcome.error is None:
                attempt = _tuple(
                    CompensationAttempt,
                    (number, started, clock.now(), AttemptOutcome.SUCCEEDED, None, actor),
                )
                recorded = recorded.then(
                    ledger.step_to(
                        step,
                        StepState.ROLLED_BACK,
                        actor=actor,
                        happened=True,
                        compensation_attempts=(*step.compensation_attempts, attempt),
                    )
                )
                return _PLAIN[CompensationOutcome.ROLLED_BACK].with_recorded(recorded)
            error = outcome.error
            timed_out = isinstance(error, TimeoutError)
            if not policy.should_retry(error, tries):
                failed = self._undo_failed(step, error, started, actor, timed_out=timed_out)
                return StepResult(
                    outcome=CompensationOutcome.FAILED,
                    unsaved=recorded.then(failed).unsaved,
                    undo_error=error,
                )
            attempt = CompensationAttempt(
                number=number,
                started_at=started,
                finished_at=clock.now(),
                outcome=AttemptOutcome.TIMED_OUT if timed_out else AttemptOutcome.FAILED,
                error=describe(error)[0],
                actor=actor,
            )
            recorded = recorded.then(ledger.record_attempt(step, attempt))
            yield Sleep(seconds=policy.delay(tries))

    def _undo_failed(
        self,
        step: StepRow,
        error: BaseException,
        started: datetime,
        actor: str | None,
        *,
        timed_out: bool,
    ) -> Recorded:
        message, kind, trace = describe(error)
        attempt = CompensationAttempt(
            number=len(step.compensation_attempts) + 1,
            started_at=started,
            finished_at=self.ledger.clock.now(),
            outcome=AttemptOutcome.TIMED_OUT if timed_out else AttemptOutcome.FAILED,
            error=message,
            actor=actor,
        )
        return self.ledger.step_to(
            step,
            StepState.ROLLBACK_FAILED,
            actor=actor,
            happened=True,
            compensation_attempts=(*step.compensation_attempts, attempt),
            error=message,
            error_type=kind,
            traceback=trace,
            detail=message,
        )

    # ------------------------------------------------------------ a human's hand

    def resolve_step(self, step: StepRow, note: str, actor: str | None) -> None:
        """A human handled the step's side effect by hand: RESOLVED, with their note."""
        if not note or not note.strip():
            raise ValueError("resolve() needs a note saying how the side effect was handled")
        self.ledger.step_to(
            step,
            StepState.RESOLVED,
            actor=actor,
            decision_note=note,
            decided_by=actor,
            detail=note,
        )

    def human_step(self, step_id: str, action: str) -> StepRow:
        """The step a human acts on: ROLLBACK_FAILED or IN_DOUBT, in a stopped rollback."""
        ledger = self.ledger
        step = ledger.get(step_id)
        name = ledger.record.name
        if ledger.record.status not in (SagaStatus.ROLLBACK_FAILED, SagaStatus.COMPENSATING):
            raise TransitionError(
                f"saga {name!r}",
                ledger.record.status,
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

    def retry(self, step_id: str, actor: str | None) -> Flow[StepSnapshot]:
        """Run a failed (or in-doubt) step's undo again; raises a change it could not store."""
        step = self.human_step(step_id, "retry_compensation")
        result = yield from self.run_undo(step, actor or self.ledger.actor)
        self.settle(actor)
        if result.unsaved is not None:
            raise result.unsaved
        return step.snapshot()

    def mark_failed(self, step: StepRow, error: BaseException | str) -> None:
        """A registered step failed elsewhere; raises if that could not be stored."""
        check_step_transition(step.state, StepState.FAILED, step_id=step.id)
        recorded = self.fail_step(step, error)
        if recorded.unsaved is not None:
            raise recorded.unsaved

    # ------------------------------------------------------------ after a crash

    def recover(self, actor: str) -> Flow[RollbackReport]:
        """Roll back what a dead process left, from where it stopped.

        A step found PENDING becomes IN_DOUBT (its effect may have happened: a
        human judges it); an undo found running is recorded as interrupted and
        runs again with the same idempotency key (undos must tolerate a repeat).
        """
        ledger = self.ledger
        recorded = SAVED
        for step in ledger.steps:
            if step.state is StepState.PENDING:
                ledger.step_to(
                    step,
                    StepState.IN_DOUBT,
                    detail="the process died while this step ran; its effect may have happened",
                    error="in doubt: the process stopped while this step was running",
                )
            elif step.state is StepState.COMPENSATING:
                attempt = CompensationAttempt(
                    number=len(step.compensation_attempts) + 1,
                    started_at=step.updated_at,
                    finished_at=ledger.clock.now(),
                    outcome=AttemptOutcome.INTERRUPTED,
                    error="the process died during this undo",
                )
                recorded = recorded.then(ledger.record_attempt(step, attempt))
        resume = ledger.record.status is SagaStatus.COMPENSATING
        run = yield from self.rollback_run(actor, resume=resume)
        unsaved = recorded.unsaved or run.unsaved
        if unsaved is not None:
            raise unsaved
        return run.report


def _first(earlier: StepResult, later: StepResult) -> StepResult:
    """``later``'s outcome, with the first store error and undo error of the two."""
    if earlier.unsaved is None and earlier.undo_error is None:
        return later
    return StepResult(
        outcome=later.outcome,
        unsaved=earlier.unsaved or later.unsaved,
        undo_error=earlier.undo_error or later.undo_error,
    )


def _execute_args(tool: Tool, saga_id: str, step: StepRow, input: Any) -> tuple[Any, ...]:
    """The arguments of a tool's execute: the input, and the context when it takes one."""
    if not tool.execute_takes_context:
        return (input,)
    context = ExecuteContext(
        saga_id=saga_id,
        step_id=step.id,
        idempotency_key=step.idempotency_key,
        metadata=dict(step.metadata),
    )
    return (input, context)


def _undo_args(
    tool: Tool, saga_id: str, step: StepRow, attempt: int, actor: str | None
) -> tuple[Any, ...]:
    """The arguments of a tool's undo, as many as it takes: output, input, context."""
    if tool.undo_arity == 3:
        context = UndoContext(
            saga_id=saga_id,
            step_id=step.id,
            idempotency_key=step.idempotency_key,
            attempt=attempt,
            actor=actor,
        )
        return (step.output, step.input, context)
    return (step.output, step.input)[: tool.undo_arity]


def _approval_request(record: SagaRecord, step: StepRow, why: str) -> ApprovalRequest:
    """What the gate is asked about one undo (its step as a snapshot, and why it asks)."""
    return ApprovalRequest(saga_id=record.id, saga_name=record.name, step=step.snapshot(), why=why)


def _approval_reason(step: StepRow, policy: ApprovalPolicy | None) -> str | None:
    """Why this undo needs a person's approval (its tool, its step, the saga's policy), if so."""
    if step.tool is not None and step.tool.requires_approval:
        return f"tool {step.tool_name!r} requires approval before its undo runs"
    if step.requires_approval:
        return "the step was registered as needing approval"
    if policy is not None and policy(step.snapshot()):
        return "the saga's approval policy matched this step"
    return None


def _checked_decision(value: Any, *allowed: DecisionAction) -> Decision:
    """The gate's answer, once it is a :class:`Decision` this question allows."""
    if not isinstance(value, Decision) or value.action not in allowed:
        names = ", ".join(a.name for a in allowed)
        raise GateError(f"the gate must answer a Decision of {names}; got {value!r}")
    return value

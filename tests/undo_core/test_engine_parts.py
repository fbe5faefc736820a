"""The parts a saga is made of, and the hooks other modules build on.

The ledger hands back a store error as a result (never a flag left on the saga),
the gate is asked through typed questions, compensation outcomes are an enum,
and recovery and declarative sagas use public hooks only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import undo_core
from undo_core import (
    ApprovalRequest,
    ApprovalScreen,
    AutoApproveGate,
    Decision,
    FailedCompensation,
    MemoryStore,
    Saga,
    SagaChange,
    SagaRecord,
    SagaRollbackError,
    SagaStatus,
    StepState,
    StoreError,
    define_tool,
)
from undo_core.engine.flows import CompensationOutcome
from undo_core.engine.ledger import SAVED, Ledger, Recorded
from undo_core.testing import FakeClock
from undo_core.vocabulary.gates import GateQuestions


class TwoQuestions:
    def approve_compensation(self, request: ApprovalRequest) -> Decision:
        return Decision.approve()

    def compensation_failed(self, request: FailedCompensation) -> Decision:
        return Decision.leave()


class Screening(TwoQuestions):
    def __init__(self) -> None:
        self.asked: list[str] = []

    def approval_needed(self, request: ApprovalRequest) -> str | None:
        self.asked.append(request.step.id)
        return None


class RefusesNextWrite(MemoryStore):
    """A store that refuses the writes it is told to, and takes every other."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = False

    def apply(self, change: SagaChange) -> None:
        if self.refuse:
            self.refuse = False
            raise StoreError("the store is down")
        super().apply(change)


# ---------------------------------------------------------------- the gate


def test_a_gate_without_approval_needed_is_not_asked_it() -> None:
    questions = GateQuestions.of(TwoQuestions())
    assert questions.approval_needed is None
    assert not isinstance(TwoQuestions(), ApprovalScreen)


def test_a_screening_gate_is_asked_before_each_unflagged_undo() -> None:
    gate = Screening()
    assert isinstance(gate, ApprovalScreen)
    assert GateQuestions.of(gate).approval_needed == gate.approval_needed
    saga = Saga(gate=gate)
    tool = define_tool("t", lambda x: x, lambda out, x: None)
    saga.execute(tool, 1)
    saga.execute(tool, 2)
    saga.rollback()
    assert gate.asked == ["step-2", "step-1"]
    assert saga.status is SagaStatus.ROLLED_BACK


def test_the_default_gate_answers_the_two_questions() -> None:
    questions = GateQuestions.of(AutoApproveGate())
    assert questions.approval_needed is None
    assert questions.compensation_failed(None).action == "leave"  # type: ignore[arg-type]


def test_something_that_is_not_a_gate_is_refused() -> None:
    with pytest.raises(TypeError, match="ApprovalGate"):
        Saga(gate=object())  # type: ignore[arg-type]


# ---------------------------------------------------------------- store errors as results


def ledger_on(store: MemoryStore) -> Ledger:
    clock = FakeClock()
    now = clock.now()
    record = SagaRecord(
        id="s1", name="ledger", status=SagaStatus.IN_PROGRESS, created_at=now, updated_at=now
    )
    ledger = Ledger(
        record,
        store=store,
        clock=clock,
        owner="here:1:a",
        lease=timedelta(seconds=60),
        listeners=[],
        actor=None,
    )
    ledger.start()
    return ledger


def test_a_change_the_world_already_made_comes_back_with_the_store_error() -> None:
    store = RefusesNextWrite()
    ledger = ledger_on(store)
    step = ledger.add_step(define_tool("t", lambda x: x), 1)
    store.refuse = True
    recorded = ledger.step_to(step, StepState.COMPLETED, happened=True, output=2)
    assert isinstance(recorded.unsaved, StoreError)
    assert step.state is StepState.COMPLETED  # memory moved on: the rollback must undo it
    assert step.unpersisted
    ledger.saga_to(SagaStatus.COMPENSATING)
    store.refuse = True  # later writes of an unpersisted step are best effort: no raise
    assert ledger.step_to(step, StepState.COMPENSATING).unsaved is not None
    assert step.state is StepState.COMPENSATING


class StoreDown(MemoryStore):
    def apply(self, change: SagaChange) -> None:
        raise StoreError("the store is down")


def test_a_store_down_from_the_first_write_raises_store_error_and_runs_no_tool() -> None:
    # The saga's first write (its first step's PENDING) fails, then so does the rollback's
    # first write: the error is the store's, not a rule refusing the engine's own change.
    ran: list[int] = []
    saga = Saga("first", store=StoreDown())
    with pytest.raises(StoreError, match="the store is down"):
        saga.execute(define_tool("t", ran.append, lambda out, x: None), 1)
    assert ran == []


def test_a_first_write_refused_once_rolls_back_a_saga_the_rules_accept() -> None:
    store = RefusesNextWrite()
    store.refuse = True
    ran: list[int] = []
    saga = Saga("first", store=store)
    with pytest.raises(SagaRollbackError):
        saga.execute(define_tool("t", ran.append, lambda out, x: None), 1)
    assert ran == []  # its PENDING was never stored: the tool did not run
    stored = store.load(saga.id)
    assert stored is not None
    assert stored.record.status is SagaStatus.ROLLED_BACK
    assert stored.record.failed_step == "step-1"


def test_a_refused_change_that_did_not_happen_raises_and_memory_stays() -> None:
    store = RefusesNextWrite()
    ledger = ledger_on(store)
    step = ledger.add_step(define_tool("t", lambda x: x), 1)
    store.refuse = True
    with pytest.raises(StoreError):
        ledger.step_to(step, StepState.COMPLETED, output=2)
    assert step.state is StepState.PENDING
    assert step.output is None
    assert ledger.step_to(step, StepState.COMPLETED, output=2) is SAVED


def test_recorded_then_keeps_the_first_error() -> None:
    first, second = Recorded(unsaved=StoreError("one")), Recorded(unsaved=StoreError("two"))
    assert first.then(second) is first
    assert SAVED.then(second) is second
    assert SAVED.then(SAVED) is SAVED


def test_compensation_outcomes_are_plain_strings() -> None:
    assert CompensationOutcome.WAITING == "waiting"
    assert {o.value for o in CompensationOutcome} == {
        "rolled_back",
        "failed",
        "left",
        "done",
        "waiting",
    }


# ---------------------------------------------------------------- public hooks


def test_execute_with_a_step_id_runs_a_pending_step_again() -> None:
    saga = Saga()
    tool = define_tool("t", lambda x: x * 2)
    saga.add_step(tool, 1)  # step-1, left PENDING as by a process that died
    assert saga.execute(tool, 1, step_id="step-1") == 2
    assert [s.state for s in saga.steps] == [StepState.COMPLETED]
    assert saga.execute(tool, 3, step_id="named") == 6
    assert saga.step("named").state is StepState.COMPLETED


def test_declare_marks_the_saga_for_its_definition() -> None:
    store = MemoryStore()
    saga = Saga("d", store=store)
    saga.declare("checkout", {"cart": 1})
    saga.start()
    assert saga.record.options["kind"] == "declarative"
    assert saga.record.options["definition"] == "checkout"
    snapshot = store.load(saga.id)
    assert snapshot is not None
    assert snapshot.record.state == {"cart": 1}


def test_resume_after_crash_finishes_a_saga_taken_over_from_a_dead_owner() -> None:
    store, clock = MemoryStore(), FakeClock()
    undone: list[Any] = []
    tool = define_tool("t", lambda x: x, lambda out, x: undone.append(x))
    dead = Saga("crash", store=store, clock=clock, owner="elsewhere:1:dead", lease_seconds=10)
    dead.execute(tool, 1)
    dead.add_step(tool, 2)  # the process died while this one ran
    clock.advance(60)
    saga = Saga.restore(store, dead.id, [tool], clock=clock)
    report = saga.resume_after_crash()
    assert undone == [1]
    assert report.in_doubt == ("step-2",)
    assert saga.status is SagaStatus.ROLLBACK_FAILED


def test_what_sagaboard_needs_is_public() -> None:
    for name in ("default_owner", "local_owner_dead", "owner_is_gone", "ApprovalScreen"):
        assert name in undo_core.__all__
    assert undo_core.local_owner_dead(undo_core.default_owner()) is False


def test_a_failure_the_store_refused_is_named_on_the_error_when_nothing_rolls_back() -> None:
    store = RefusesNextWrite()
    saga = Saga(store=store, auto_rollback_on_failure=False)

    def breaks(x: Any) -> None:
        store.refuse = True  # the step's FAILED write is refused, the saga's is taken
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom") as caught:
        saga.execute(define_tool("breaks", breaks), 1)
    assert saga.status is SagaStatus.FAILED
    assert any("could not be saved" in note for note in caught.value.__notes__)

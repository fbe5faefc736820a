"""A rolled-back saga says whether every side effect was undone: the outcome, in one place."""

from __future__ import annotations

from typing import Any

import pytest

from undo_core import (
    Decision,
    ExceptionKind,
    RollbackOutcome,
    Saga,
    SagaRollbackError,
    SagaStatus,
    StepFacts,
    StepState,
    WaitingFor,
    assess_rollback,
    define_tool,
)
from undo_core.testing import ScriptedGate


def _noop(*args: Any) -> None:
    return None


def _fedex(inp: Any) -> Any:
    raise ConnectionError("FedEx API returned 500")


RETURN = define_tool("return_item", lambda inp: inp, _noop)
REFUND = define_tool("refund_payment", lambda inp: {"id": "re_1"}, _noop, requires_approval=True)
LABEL = define_tool("generate_label", _fedex)
EMAIL = define_tool("send_email", lambda inp: "sent")


def storebot(gate: Any, **options: Any) -> Saga:
    saga = Saga("storebot-return", gate=gate, **options)
    with pytest.raises(SagaRollbackError):
        saga.execute(RETURN, {"itemId": "882"})
        saga.execute(REFUND, {"chargeId": "ch_1"})
        saga.execute(LABEL, {"orderId": "o-1"})
    return saga


def test_a_clean_rollback_is_clean_and_the_failed_forward_step_is_no_exception() -> None:
    saga = storebot(ScriptedGate(approvals=[Decision.approve()]))
    found = saga.assess()
    assert saga.status is SagaStatus.ROLLED_BACK
    assert found.outcome is RollbackOutcome.CLEAN and found.clean
    assert found.exceptions == () and found.summary == "" and found.waiting_for is None
    assert saga.report().clean


def test_a_rejected_undo_makes_the_rollback_one_with_exceptions() -> None:
    saga = storebot(ScriptedGate(approvals=[Decision.reject("goodwill", actor="bob")]))
    found = saga.assess()
    assert saga.status is SagaStatus.ROLLED_BACK  # the seed's status name stays
    assert found.outcome is RollbackOutcome.WITH_EXCEPTIONS and not found.clean
    ((exception,),) = [found.exceptions]
    assert (exception.step_id, exception.kind) == ("step-2", ExceptionKind.REJECTED)
    assert exception.why == "an approver rejected its undo; the side effect remains (goodwill)"
    assert found.summary == "1 rejected"
    assert not saga.report().clean  # the engine's own report agrees


def test_a_resolved_undo_makes_the_rollback_one_with_exceptions() -> None:
    undo_fails = define_tool("refund_payment", lambda inp: 1, _fedex)
    saga = Saga("s", on_compensation_failure="halt")
    saga.execute(RETURN, {})
    saga.execute(undo_fails, {})
    saga.rollback()
    assert saga.assess().waiting_for is WaitingFor.OPERATOR
    assert saga.assess().outcome is RollbackOutcome.WITH_EXCEPTIONS
    saga.resolve("step-2", "refunded by hand in Stripe", actor="olga")
    saga.resume_rollback()
    found = saga.assess()
    assert saga.status is SagaStatus.ROLLED_BACK
    assert found.outcome is RollbackOutcome.WITH_EXCEPTIONS
    assert found.summary == "1 resolved by hand"
    assert found.exceptions[0].note == "refunded by hand in Stripe"


def test_a_step_without_undo_that_completed_is_an_exception_but_one_that_failed_is_not() -> None:
    saga = Saga("s")
    with pytest.raises(SagaRollbackError):
        saga.execute(EMAIL, {})
        saga.execute(LABEL, {})
    found = saga.assess()
    assert [(e.step_id, e.kind) for e in found.exceptions] == [("step-1", ExceptionKind.NO_UNDO)]


@pytest.mark.parametrize(
    ("state", "left", "kind", "waiting"),
    [
        (StepState.ROLLBACK_FAILED, False, ExceptionKind.FAILED, WaitingFor.OPERATOR),
        (StepState.ROLLBACK_FAILED, True, ExceptionKind.LEFT, None),
        (StepState.IN_DOUBT, False, ExceptionKind.IN_DOUBT, WaitingFor.OPERATOR),
        (StepState.IN_DOUBT, True, ExceptionKind.IN_DOUBT, None),
    ],
)
def test_a_failed_left_or_in_doubt_undo_is_never_clean(
    state: StepState, left: bool, kind: ExceptionKind, waiting: WaitingFor | None
) -> None:
    steps = [
        StepFacts("step-1", "return_item", StepState.COMPLETED),
        StepFacts("step-2", "refund_payment", state, left=left),
        StepFacts("step-3", "generate_label", StepState.FAILED),
    ]
    found = assess_rollback(SagaStatus.ROLLBACK_FAILED, steps)
    assert found.outcome is RollbackOutcome.WITH_EXCEPTIONS
    assert [(e.step_id, e.kind) for e in found.exceptions] == [
        ("step-1", ExceptionKind.NOT_UNDONE),
        ("step-2", kind),
    ]
    assert found.waiting_for is waiting


def test_a_running_rollback_has_no_outcome_yet_but_says_who_it_waits_for() -> None:
    saga = storebot(ScriptedGate(approvals=[Decision.wait()]))
    found = saga.assess()
    assert saga.status is SagaStatus.COMPENSATING
    assert found.outcome is None and found.exceptions == ()
    assert found.waiting_for is WaitingFor.APPROVAL


@pytest.mark.parametrize(
    "status", [SagaStatus.IN_PROGRESS, SagaStatus.COMPLETED, SagaStatus.FAILED]
)
def test_a_saga_that_is_not_rolling_back_has_no_outcome(status: SagaStatus) -> None:
    steps = [StepFacts("step-1", "send_email", StepState.COMPLETED, has_undo=False)]
    assert assess_rollback(status, steps) == assess_rollback(status, [])
    assert assess_rollback(status, steps).outcome is None


def test_the_summary_counts_each_kind_in_a_fixed_order() -> None:
    steps = [
        StepFacts("step-1", "a", StepState.RESOLVED),
        StepFacts("step-2", "b", StepState.REJECTED),
        StepFacts("step-3", "c", StepState.RESOLVED),
    ]
    found = assess_rollback(SagaStatus.ROLLED_BACK, steps)
    assert found.summary == "1 rejected, 2 resolved by hand"
    assert found.counts == {ExceptionKind.REJECTED: 1, ExceptionKind.RESOLVED: 2}

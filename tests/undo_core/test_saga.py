"""The imperative engine (agent-undo's SagaTransaction), for Saga and AsyncSaga alike."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from undo_core import (
    AttemptOutcome,
    Decision,
    EventKind,
    ExecuteContext,
    RetryPolicy,
    SagaClosedError,
    SagaEvent,
    SagaRollbackError,
    SagaStatus,
    StepNotFoundError,
    StepState,
    StepTimeoutError,
    TransitionError,
    UndoContext,
    define_tool,
)
from undo_core.testing import FakeClock, ScriptedGate


class FedExDown(RuntimeError):
    pass


def storebot(kit: Any, calls: list[str], *, refund_undo: Any = None, **refund_options: Any):
    """The seed's StoreBot tools: return_item, refund_payment, generate_label (fails)."""

    def return_item(inp: dict[str, Any]) -> dict[str, Any]:
        calls.append("return_item")
        return {"item": inp["itemId"], "status": "returned"}

    def undo_return(out: dict[str, Any], inp: dict[str, Any]) -> None:
        calls.append(f"undo:return_item:{inp['itemId']}")

    def refund(inp: dict[str, Any]) -> dict[str, Any]:
        calls.append("refund_payment")
        return {"id": "re_1", "charge": inp["chargeId"]}

    def undo_refund(out: dict[str, Any]) -> None:
        calls.append(f"undo:refund_payment:{out['id']}")

    def label(inp: dict[str, Any]) -> None:
        calls.append("generate_label")
        raise FedExDown("FedEx API returned 500")

    return (
        kit.tool("return_item", return_item, undo_return),
        kit.tool("refund_payment", refund, refund_undo or undo_refund, **refund_options),
        kit.tool("generate_label", label),
    )


def run_storebot(kit: Any, saga: Any, tools: tuple[Any, ...]) -> SagaRollbackError:
    ret, ref, lab = tools
    kit.run(saga.execute(ret, {"itemId": "882"}))
    kit.run(saga.execute(ref, {"chargeId": "ch_123"}))
    with pytest.raises(SagaRollbackError) as info:
        kit.run(saga.execute(lab, {"orderId": "o-1"}))
    return info.value


def states(saga: Any) -> list[str]:
    return [s.state.value for s in saga.steps]


# ---------------------------------------------------------------- the happy paths


def test_execute_returns_the_tool_output_and_complete_ends_the_saga(kit: Any) -> None:
    saga = kit.saga("checkout-flow")
    add = kit.tool("add", lambda x: x + 1, lambda out, x: None)
    assert kit.run(saga.execute(add, 41)) == 42
    assert saga.status == "IN_PROGRESS"
    saga.complete()
    assert saga.status is SagaStatus.COMPLETED
    assert states(saga) == ["COMPLETED"]
    assert saga.steps[0].tool_name == "add" and saga.steps[0].output == 42


def test_storebot_failure_undoes_prior_steps_in_reverse_with_the_seeds_message(kit: Any) -> None:
    calls: list[str] = []
    saga = kit.saga("storebot-return")
    err = run_storebot(kit, saga, storebot(kit, calls))

    assert str(err) == (
        'Task failed at step "step-3" (generate_label). '
        "All prior side-effects successfully rolled back."
    )
    assert calls == [
        "return_item",
        "refund_payment",
        "generate_label",
        "undo:refund_payment:re_1",
        "undo:return_item:882",
    ]
    assert saga.status is SagaStatus.ROLLED_BACK
    assert states(saga) == ["ROLLED_BACK", "ROLLED_BACK", "FAILED"]
    assert isinstance(err.cause, FedExDown) and err.__cause__ is err.cause
    assert err.failed_step == "step-3" and err.failed_step_name == "generate_label"
    assert err.rolled_back == ("step-2", "step-1")
    assert err.failed == () and err.skipped == () and err.unresolved == ()
    assert saga.steps[2].error == "FedEx API returned 500"
    assert saga.steps[2].error_type == "FedExDown"
    assert "FedExDown" in (saga.steps[2].traceback or "")


def test_a_tool_without_undo_is_skipped_and_the_message_does_not_claim_success(kit: Any) -> None:
    calls: list[str] = []
    email = kit.tool("send_email", lambda x: calls.append("email"))
    charge = kit.tool("charge", lambda x: "ch_1", lambda out, x: calls.append(f"refund:{out}"))
    ship = kit.tool("ship", lambda x: (_ for _ in ()).throw(RuntimeError("no courier")))
    saga = kit.saga()
    kit.run(saga.execute(email, {}))
    kit.run(saga.execute(charge, {}))
    with pytest.raises(SagaRollbackError) as info:
        kit.run(saga.execute(ship, {}))

    assert calls == ["email", "refund:ch_1"]
    assert states(saga) == ["COMPLETED", "ROLLED_BACK", "FAILED"]
    assert saga.status is SagaStatus.ROLLED_BACK
    assert info.value.skipped == ("step-1",)
    message = str(info.value)
    assert "successfully rolled back" not in message
    assert 'No undo defined, side-effects remain: "step-1" (send_email)' in message


def test_default_name_and_unique_ids(kit: Any) -> None:
    a, b = kit.saga(), kit.saga()
    assert a.name.startswith("saga-") and a.id != b.id


# ---------------------------------------------------------------- auto-rollback off


def test_without_auto_rollback_the_saga_fails_and_the_original_error_propagates(
    kit: Any,
) -> None:
    calls: list[str] = []
    ret, _ref, lab = storebot(kit, calls)
    saga = kit.saga(auto_rollback_on_failure=False)
    kit.run(saga.execute(ret, {"itemId": "882"}))
    with pytest.raises(FedExDown):
        kit.run(saga.execute(lab, {}))
    assert saga.status is SagaStatus.FAILED
    assert calls == ["return_item", "generate_label"]  # nothing undone
    report = kit.run(saga.rollback())  # the caller decides later
    assert report.rolled_back == ("step-1",)
    assert saga.status is SagaStatus.ROLLED_BACK


# ---------------------------------------------------------------- manual flow


def test_manual_steps_number_from_one_and_rollback_undoes_only_completed_ones(kit: Any) -> None:
    undone: list[str] = []
    backup = kit.tool("create_backup", lambda x: None, lambda out, x: undone.append(x["file"]))
    saga = kit.saga("manual")
    s1 = saga.add_step(backup, {"file": "a.json"})
    s2 = saga.add_step(backup, {"file": "b.json"})
    s3 = saga.add_step(backup, {"file": "c.json"})
    assert (s1, s2, s3) == ("step-1", "step-2", "step-3")
    assert states(saga) == ["PENDING"] * 3
    saga.mark_completed(s1, {"path": "a.json"})
    saga.mark_completed(s2)
    saga.mark_failed(s3, "disk full")
    assert saga.status is SagaStatus.IN_PROGRESS  # mark_failed alone does not roll back
    assert saga.steps[2].error == "disk full"

    report = kit.run(saga.rollback())
    assert undone == ["b.json", "a.json"]
    assert report.rolled_back == ("step-2", "step-1")
    assert saga.steps[0].output == {"path": "a.json"}

    undone.clear()
    again = kit.run(saga.rollback())  # a second call is a no-op
    assert undone == [] and again.rolled_back == ("step-2", "step-1")


def test_step_numbers_are_never_reused(kit: Any) -> None:
    t = kit.tool("t", lambda x: x, lambda o, x: None)
    saga = kit.saga()
    saga.mark_failed(saga.add_step(t, 1), "boom")
    assert saga.add_step(t, 2) == "step-2"


def test_rollback_marks_steps_never_marked_completed_as_failed_not_undone(kit: Any) -> None:
    undone: list[int] = []
    t = kit.tool("t", lambda x: x, lambda o, x: undone.append(x))
    saga = kit.saga()
    saga.mark_completed(saga.add_step(t, 1), 1)
    saga.add_step(t, 2)
    kit.run(saga.rollback())
    assert undone == [1]
    assert states(saga) == ["ROLLED_BACK", "FAILED"]
    assert saga.status is SagaStatus.ROLLED_BACK


def test_complete_refuses_while_a_step_is_pending(kit: Any) -> None:
    t = kit.tool("t", lambda x: x)
    saga = kit.saga()
    saga.add_step(t, 1)
    with pytest.raises(TransitionError, match="still PENDING"):
        saga.complete()
    assert saga.status is SagaStatus.IN_PROGRESS


@pytest.mark.parametrize("end", ["complete", "rollback"])
def test_an_ended_saga_refuses_new_steps_without_calling_the_tool(kit: Any, end: str) -> None:
    called: list[int] = []
    t = kit.tool("t", lambda x: called.append(x), lambda o, x: None)
    saga = kit.saga()
    kit.run(saga.execute(t, 1))
    if end == "complete":
        saga.complete()
    else:
        kit.run(saga.rollback())
    before = saga.steps
    with pytest.raises(SagaClosedError, match="refused"):
        kit.run(saga.execute(t, 2))
    with pytest.raises(SagaClosedError):
        saga.add_step(t, 3)
    assert called == [1] and saga.steps == before


def test_illegal_step_moves_raise_and_change_nothing(kit: Any) -> None:
    t = kit.tool("t", lambda x: x, lambda o, x: None)
    saga = kit.saga()
    sid = saga.add_step(t, 1)
    saga.mark_completed(sid, "first")
    before = saga.steps
    with pytest.raises(TransitionError, match="COMPLETED to COMPLETED"):
        saga.mark_completed(sid, "second")
    with pytest.raises(TransitionError, match="COMPLETED to FAILED"):
        saga.mark_failed(sid, "late")
    assert saga.steps == before and saga.steps[0].output == "first"
    with pytest.raises(StepNotFoundError, match="step-9"):
        saga.mark_completed("step-9", None)


def test_bad_arguments_fail_clearly(kit: Any) -> None:
    saga = kit.saga()
    with pytest.raises(TypeError, match="define_tool"):
        kit.run(saga.execute(lambda x: x, 1))
    with pytest.raises(ValueError, match="on_compensation_failure"):
        kit.saga(on_compensation_failure="ignore")
    with pytest.raises(TypeError, match="SagaStore"):
        kit.saga(store=object())
    with pytest.raises(ValueError, match="name"):
        kit.saga("  ")
    assert saga.steps == () and saga.status is SagaStatus.IN_PROGRESS


def test_snapshots_are_immutable(kit: Any) -> None:
    t = kit.tool("t", lambda x: x)
    saga = kit.saga()
    kit.run(saga.execute(t, 1))
    with pytest.raises(AttributeError):
        saga.steps[0].state = StepState.FAILED  # type: ignore[misc]


# ---------------------------------------------------------------- failing undos


def failing_refund_undo(out: Any) -> None:
    raise ConnectionError("Stripe unreachable")


def test_under_continue_a_failed_undo_is_recorded_and_the_rest_still_run(kit: Any) -> None:
    calls: list[str] = []
    saga = kit.saga()
    err = run_storebot(kit, saga, storebot(kit, calls, refund_undo=failing_refund_undo))

    assert saga.status is SagaStatus.ROLLBACK_FAILED
    assert states(saga) == ["ROLLED_BACK", "ROLLBACK_FAILED", "FAILED"]
    assert calls[-1] == "undo:return_item:882"
    assert "successfully" not in str(err)
    assert 'Rollback failed: the undo of step "step-2" (refund_payment) raised' in str(err)
    assert isinstance(err.compensation_cause, ConnectionError)
    assert err.failed_comp_step_name == "refund_payment"
    assert err.failed == ("step-2",) and err.unresolved == ("step-2",)
    assert err.rolled_back == ("step-1",)
    assert saga.steps[1].error == "Stripe unreachable"
    attempts = saga.steps[1].compensation_attempts
    assert [a.outcome for a in attempts] == [AttemptOutcome.FAILED]


def test_under_halt_the_cascade_stops_and_older_steps_stay_unresolved(kit: Any) -> None:
    calls: list[str] = []
    saga = kit.saga(on_compensation_failure="halt")
    err = run_storebot(kit, saga, storebot(kit, calls, refund_undo=failing_refund_undo))

    assert saga.status is SagaStatus.ROLLBACK_FAILED
    assert states(saga) == ["COMPLETED", "ROLLBACK_FAILED", "FAILED"]
    assert not any(c.startswith("undo:return_item") for c in calls)
    assert err.unresolved == ("step-2", "step-1")
    assert "Manual intervention required" in str(err)


def test_retry_then_resume_finishes_a_halted_rollback(kit: Any) -> None:
    calls: list[str] = []
    failures = [ConnectionError("Stripe unreachable")]

    def flaky_undo(out: Any) -> None:
        if failures:
            raise failures.pop()
        calls.append("undo:refund_payment")

    saga = kit.saga(on_compensation_failure="halt")
    run_storebot(kit, saga, storebot(kit, calls, refund_undo=flaky_undo))
    snap = kit.run(saga.retry_compensation("step-2", actor="alice"))

    assert snap.state is StepState.ROLLED_BACK
    assert [a.outcome for a in snap.compensation_attempts] == ["failed", "succeeded"]
    assert snap.compensation_attempts[-1].actor == "alice"
    assert saga.status is SagaStatus.ROLLBACK_FAILED  # step-1 still waits
    report = kit.run(saga.resume_rollback())
    assert report.rolled_back == ("step-2", "step-1")
    assert saga.status is SagaStatus.ROLLED_BACK
    assert calls[-2:] == ["undo:refund_payment", "undo:return_item:882"]


def test_resolve_by_hand_records_the_note_and_lets_the_rollback_continue(kit: Any) -> None:
    calls: list[str] = []
    saga = kit.saga(on_compensation_failure="halt")
    run_storebot(kit, saga, storebot(kit, calls, refund_undo=failing_refund_undo))
    with pytest.raises(ValueError, match="note"):
        saga.resolve("step-2", "  ")
    assert saga.steps[1].state is StepState.ROLLBACK_FAILED  # unchanged

    snap = saga.resolve("step-2", "refund cancelled in the Stripe dashboard", actor="bob")
    assert snap.state is StepState.RESOLVED and snap.decided_by == "bob"
    assert snap.decision_note == "refund cancelled in the Stripe dashboard"
    kit.run(saga.resume_rollback())
    assert states(saga) == ["ROLLED_BACK", "RESOLVED", "FAILED"]
    assert saga.status is SagaStatus.ROLLED_BACK


def test_retry_under_continue_ends_the_saga_rolled_back_when_nothing_is_left(kit: Any) -> None:
    failures = [ConnectionError("down")]

    def flaky(out: Any) -> None:
        if failures:
            raise failures.pop()

    saga = kit.saga()
    run_storebot(kit, saga, storebot(kit, [], refund_undo=flaky))
    assert saga.status is SagaStatus.ROLLBACK_FAILED
    kit.run(saga.retry_compensation("step-2"))
    assert saga.status is SagaStatus.ROLLED_BACK


def test_retry_and_resolve_refuse_steps_that_did_not_fail(kit: Any) -> None:
    saga = kit.saga(on_compensation_failure="halt")
    run_storebot(kit, saga, storebot(kit, [], refund_undo=failing_refund_undo))
    with pytest.raises(TransitionError, match="ROLLBACK_FAILED or IN_DOUBT"):
        kit.run(saga.retry_compensation("step-1"))
    with pytest.raises(TransitionError):
        saga.resolve("step-3", "n/a")
    with pytest.raises(StepNotFoundError):
        kit.run(saga.retry_compensation("step-7"))
    fresh = kit.saga()
    fresh.add_step(kit.tool("t", lambda x: x), 1)
    with pytest.raises(TransitionError, match="rollback failed"):
        fresh.resolve("step-1", "x")
    with pytest.raises(TransitionError, match="call rollback"):
        kit.run(fresh.resume_rollback())


# ---------------------------------------------------------------- gates and approvals


def test_a_rejected_undo_does_not_run_and_the_step_records_why(kit: Any) -> None:
    calls: list[str] = []
    gate = ScriptedGate(
        approvals=[Decision.reject("refund stands: customer keeps it", actor="ann")]
    )
    saga = kit.saga(gate=gate)
    err = run_storebot(kit, saga, storebot(kit, calls, requires_approval=True))

    assert "undo:refund_payment:re_1" not in calls
    assert calls[-1] == "undo:return_item:882"
    step = saga.steps[1]
    assert step.state is StepState.REJECTED
    assert step.decision_note == "refund stands: customer keeps it" and step.decided_by == "ann"
    assert [r.step.id for r in gate.approval_requests] == ["step-2"]
    assert "requires approval" in gate.approval_requests[0].why
    assert err.rejected == ("step-2",)
    assert "rejected by an approver" in str(err) and "successfully" not in str(err)
    assert saga.status is SagaStatus.ROLLED_BACK


def test_an_approved_undo_runs_and_records_the_approver(kit: Any) -> None:
    calls: list[str] = []
    gate = ScriptedGate(approvals=[Decision.approve(actor="ann", reason="ok")])
    saga = kit.saga(gate=gate)
    run_storebot(kit, saga, storebot(kit, calls, requires_approval=True))
    step = saga.steps[1]
    assert step.state is StepState.ROLLED_BACK and step.decided_by == "ann"
    assert step.compensation_attempts[0].actor == "ann"


def test_an_undecided_approval_pauses_the_rollback_in_order_until_resumed(kit: Any) -> None:
    calls: list[str] = []
    gate = ScriptedGate(approvals=[Decision.wait(reason="queued for an approver")])
    saga = kit.saga(gate=gate)  # "continue" mode: a wait still stops the cascade
    run_storebot(kit, saga, storebot(kit, calls, requires_approval=True))
    assert saga.status is SagaStatus.COMPENSATING
    assert states(saga) == ["COMPLETED", "AWAITING_APPROVAL", "FAILED"]
    assert not any(c.startswith("undo:") for c in calls)  # return_item waits its turn

    gate._approvals.append(Decision.approve(actor="ann"))
    kit.run(saga.resume_rollback())
    assert saga.status is SagaStatus.ROLLED_BACK
    assert [c for c in calls if c.startswith("undo:")] == [
        "undo:refund_payment:re_1",
        "undo:return_item:882",
    ]
    assert saga.steps[1].decided_by == "ann"


class RuledGate(ScriptedGate):
    """A gate that also knows rules of its own (as sagaboard's policies)."""

    def __init__(self, rule: Any) -> None:
        super().__init__()
        self.rule = rule

    def approval_needed(self, request: Any) -> str | None:
        return self.rule(request.step)


def test_a_gate_can_ask_for_approval_of_an_undo_nothing_local_flags(kit: Any) -> None:
    calls: list[str] = []
    gate = RuledGate(
        lambda step: "policy 'refunds'" if step.tool_name == "refund_payment" else None
    )
    saga = kit.saga(gate=gate)
    run_storebot(kit, saga, storebot(kit, calls))
    assert [(r.step.tool_name, r.why) for r in gate.approval_requests] == [
        ("refund_payment", "policy 'refunds'")
    ]
    assert saga.status is SagaStatus.ROLLED_BACK


def test_an_undo_whose_rule_cannot_be_read_does_not_run_unattended(kit: Any) -> None:
    calls: list[str] = []

    def unreachable(step: Any) -> str | None:
        raise ConnectionError("policy server down")

    saga = kit.saga(gate=RuledGate(unreachable))
    run_storebot(kit, saga, storebot(kit, calls))
    assert saga.status is SagaStatus.COMPENSATING  # paused before the newest undo
    assert not any(c.startswith("undo:") for c in calls)


def test_the_saga_policy_decides_which_undos_need_approval(kit: Any) -> None:
    gate = ScriptedGate()
    saga = kit.saga(gate=gate, approval_policy=lambda step: step.tool_name == "refund_payment")
    run_storebot(kit, saga, storebot(kit, []))
    assert [r.step.tool_name for r in gate.approval_requests] == ["refund_payment"]
    assert "policy" in gate.approval_requests[0].why


def test_under_halt_the_gate_can_retry_a_failed_undo(kit: Any) -> None:
    failures = [ConnectionError("down")]

    def flaky(out: Any) -> None:
        if failures:
            raise failures.pop()

    gate = ScriptedGate(failures=[Decision.retry(actor="ops")])
    saga = kit.saga(on_compensation_failure="halt", gate=gate)
    err = run_storebot(kit, saga, storebot(kit, [], refund_undo=flaky))
    assert saga.status is SagaStatus.ROLLED_BACK
    assert gate.failure_requests[0].error == "down"
    assert len(saga.steps[1].compensation_attempts) == 2
    assert err.compensation_cause is not None  # the first undo did fail


def test_under_halt_the_gate_can_resolve_a_failed_undo(kit: Any) -> None:
    gate = ScriptedGate(failures=[Decision.resolve("done by hand", actor="ops")])
    saga = kit.saga(on_compensation_failure="halt", gate=gate)
    err = run_storebot(kit, saga, storebot(kit, [], refund_undo=failing_refund_undo))
    assert states(saga) == ["ROLLED_BACK", "RESOLVED", "FAILED"]
    assert saga.status is SagaStatus.ROLLED_BACK
    assert "Resolved by hand" in str(err)


def test_a_gate_that_raises_leaves_the_step_waiting_for_a_human(kit: Any) -> None:
    class BrokenGate:
        def approve_compensation(self, request: Any) -> Decision:
            raise ConnectionError("sagaboard unreachable")

        def compensation_failed(self, request: Any) -> Decision:
            raise AssertionError("not asked")

    calls: list[str] = []
    saga = kit.saga(gate=BrokenGate())
    run_storebot(kit, saga, storebot(kit, calls, requires_approval=True))
    assert states(saga) == ["ROLLED_BACK", "AWAITING_APPROVAL", "FAILED"]
    assert saga.status is SagaStatus.ROLLBACK_FAILED


def test_a_sync_saga_refuses_async_tools_and_async_gates() -> None:
    from undo_core import Saga, define_tool

    async def work(x: Any) -> Any:
        return x

    class AsyncGate:
        async def approve_compensation(self, request: Any) -> Decision:
            return Decision.approve()

        async def compensation_failed(self, request: Any) -> Decision:
            return Decision.leave()

    saga = Saga()
    with pytest.raises(TypeError, match="AsyncSaga"):
        saga.execute(define_tool("w", work), 1)
    assert saga.steps == ()
    with pytest.raises(TypeError, match="AsyncSaga"):
        Saga(gate=AsyncGate())


def test_an_async_saga_accepts_an_async_gate() -> None:
    import asyncio

    from undo_core import AsyncSaga, define_tool

    class AsyncGate:
        async def approve_compensation(self, request: Any) -> Decision:
            return Decision.reject("no", actor="async-ann")

        async def compensation_failed(self, request: Any) -> Decision:
            return Decision.leave()

    async def scenario() -> AsyncSaga:
        saga = AsyncSaga(gate=AsyncGate())
        t = define_tool("t", lambda x: x, lambda o, x: None, requires_approval=True)
        await saga.execute(t, 1)
        await saga.rollback()
        return saga

    saga = asyncio.run(scenario())
    assert saga.steps[0].state is StepState.REJECTED and saga.steps[0].decided_by == "async-ann"


# ---------------------------------------------------------------- retries, timeouts, context


def test_undo_retries_with_exponential_backoff_and_records_every_attempt(kit: Any) -> None:
    failures = [ConnectionError("e2"), ConnectionError("e1")]

    def flaky(out: Any, inp: Any) -> None:
        if failures:
            raise failures.pop()

    clock = FakeClock()
    policy = RetryPolicy(max_attempts=3, initial_interval=1.0, backoff=2.0, jitter=0.0)
    t = kit.tool("t", lambda x: x, flaky, undo_retry=policy)
    saga = kit.saga(clock=clock)
    kit.run(saga.execute(t, 1))
    kit.run(saga.rollback())
    step = saga.steps[0]
    assert step.state is StepState.ROLLED_BACK
    assert [a.outcome for a in step.compensation_attempts] == ["failed", "failed", "succeeded"]
    assert [a.error for a in step.compensation_attempts] == ["e1", "e2", None]
    assert clock.slept == [1.0, 2.0]


def test_non_retryable_errors_fail_at_once(kit: Any) -> None:
    calls: list[int] = []

    def undo(out: Any, inp: Any) -> None:
        calls.append(1)
        raise PermissionError("auth revoked")

    policy = RetryPolicy(max_attempts=5, initial_interval=0, non_retryable=(PermissionError,))
    t = kit.tool("t", lambda x: x, undo, undo_retry=policy)
    saga = kit.saga(clock=FakeClock())
    kit.run(saga.execute(t, 1))
    kit.run(saga.rollback())
    assert calls == [1] and saga.steps[0].state is StepState.ROLLBACK_FAILED


def sleeper(kit: Any) -> Any:
    """A function that takes 2 s: blocking in sync mode, awaiting in async mode."""
    if kit.mode == "sync":
        return lambda *args: time.sleep(2)

    async def nap(*args: Any) -> None:
        await asyncio.sleep(2)

    return nap


def test_execute_timeout_fails_the_step_and_rolls_back(kit: Any) -> None:
    undone: list[int] = []
    fast = kit.tool("fast", lambda x: x, lambda o, x: undone.append(x))
    slow = define_tool("slow", sleeper(kit), execute_timeout=0.05)
    saga = kit.saga()
    kit.run(saga.execute(fast, 1))
    started = time.monotonic()
    with pytest.raises(SagaRollbackError) as info:
        kit.run(saga.execute(slow, None))
    assert time.monotonic() - started < 1.5
    assert isinstance(info.value.cause, StepTimeoutError)
    assert "slow.execute timed out after 0.05s" in str(info.value.cause)
    assert undone == [1]


def test_undo_timeout_is_recorded_as_a_timed_out_attempt(kit: Any) -> None:
    t = define_tool("t", lambda x: x, sleeper(kit), undo_timeout=0.05)
    saga = kit.saga()
    kit.run(saga.execute(t, 1))
    kit.run(saga.rollback())
    step = saga.steps[0]
    assert step.state is StepState.ROLLBACK_FAILED
    assert step.compensation_attempts[0].outcome is AttemptOutcome.TIMED_OUT


def test_execute_and_undo_receive_contexts_with_a_stable_idempotency_key(kit: Any) -> None:
    seen: list[Any] = []

    def execute(inp: Any, ctx: ExecuteContext) -> str:
        seen.append(ctx)
        return "out"

    def undo(out: Any, inp: Any, ctx: UndoContext) -> None:
        seen.append(ctx)
        if ctx.attempt == 1:
            raise ConnectionError("first try fails")

    saga = kit.saga(clock=FakeClock())
    policy = RetryPolicy(max_attempts=2, initial_interval=0)
    kit.run(saga.execute(kit.tool("t", execute, undo, undo_retry=policy), {"a": 1}))
    kit.run(saga.rollback())
    exec_ctx, first, second = seen
    assert exec_ctx.saga_id == saga.id and exec_ctx.step_id == "step-1"
    assert exec_ctx.idempotency_key == first.idempotency_key == second.idempotency_key
    assert exec_ctx.idempotency_key == saga.steps[0].idempotency_key == f"{saga.id}:step-1"
    assert (first.attempt, second.attempt) == (1, 2)


# ---------------------------------------------------------------- events


def test_every_transition_emits_an_ordered_event(kit: Any) -> None:
    events: list[SagaEvent] = []
    saga = kit.saga("evented", listeners=[events.append], actor="agent-7")
    run_storebot(kit, saga, storebot(kit, []))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert all(e.saga_id == saga.id and e.actor == "agent-7" for e in events)
    step3 = [(e.from_state, e.to_state) for e in events if e.step_id == "step-3"]
    assert step3 == [(None, "PENDING"), ("PENDING", "FAILED")]
    saga_moves = [(e.from_state, e.to_state) for e in events if e.kind is EventKind.SAGA]
    assert saga_moves == [
        (None, "IN_PROGRESS"),
        ("IN_PROGRESS", "COMPENSATING"),
        ("COMPENSATING", "ROLLED_BACK"),
    ]
    step2 = [e.to_state for e in events if e.step_id == "step-2"]
    assert step2 == ["PENDING", "COMPLETED", "COMPENSATING", "ROLLED_BACK"]


def test_a_failing_listener_does_not_break_the_saga(kit: Any) -> None:
    def broken(event: SagaEvent) -> None:
        raise RuntimeError("listener bug")

    saga = kit.saga(listeners=[broken])
    assert kit.run(saga.execute(kit.tool("t", lambda x: x * 2), 2)) == 4


def test_unsubscribe_stops_events(kit: Any) -> None:
    events: list[SagaEvent] = []
    saga = kit.saga()
    stop = saga.subscribe(events.append)
    t = kit.tool("t", lambda x: x)
    kit.run(saga.execute(t, 1))
    count = len(events)
    stop()
    kit.run(saga.execute(t, 2))
    assert count > 0 and len(events) == count


# ---------------------------------------------------------------- context managers


def test_context_manager_completes_on_success_and_rolls_back_on_error() -> None:
    from undo_core import Saga, define_tool

    undone: list[int] = []
    t = define_tool("t", lambda x: x, lambda o, x: undone.append(x))
    with Saga() as ok:
        ok.execute(t, 1)
    assert ok.status is SagaStatus.COMPLETED and undone == []

    with pytest.raises(KeyError), Saga() as bad:
        bad.execute(t, 2)
        raise KeyError("agent crashed")
    assert bad.status is SagaStatus.ROLLED_BACK and undone == [2]


def test_async_context_manager_completes_and_rolls_back() -> None:
    import asyncio

    from undo_core import AsyncSaga, define_tool

    undone: list[int] = []

    async def undo(o: Any, x: Any) -> None:
        undone.append(x)

    t = define_tool("t", lambda x: x, undo)

    async def scenario() -> tuple[AsyncSaga, AsyncSaga]:
        async with AsyncSaga() as ok:
            await ok.execute(t, 1)
        try:
            async with AsyncSaga() as bad:
                await bad.execute(t, 2)
                raise KeyError("crash")
        except KeyError:
            pass
        return ok, bad

    ok, bad = asyncio.run(scenario())
    assert ok.status is SagaStatus.COMPLETED and bad.status is SagaStatus.ROLLED_BACK
    assert undone == [2]


def test_a_rollback_error_inside_the_block_is_not_rolled_back_twice() -> None:
    from undo_core import Saga, define_tool

    undone: list[int] = []
    t = define_tool("t", lambda x: x, lambda o, x: undone.append(x))
    boom = define_tool("boom", lambda x: 1 / 0)
    with pytest.raises(SagaRollbackError), Saga() as saga:
        saga.execute(t, 1)
        saga.execute(boom, None)
    assert undone == [1]


def test_execute_keeps_step_metadata_such_as_a_tool_call_id(kit: Any) -> None:
    saga = kit.saga()
    kit.run(saga.execute(define_tool("reserve", lambda i: 1, lambda o: None), {},
                         metadata={"tool_call_id": "call_7"}))  # fmt: skip
    assert saga.steps[0].metadata == {"tool_call_id": "call_7"}

"""Tool definitions, wrap_tools, the state tables and the public API surface."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

import undo_core
from undo_core import (
    SAGA_TRANSITIONS,
    STEP_TRANSITIONS,
    AsyncSaga,
    RetryPolicy,
    Reversibility,
    Saga,
    SagaRollbackError,
    SagaStatus,
    StepState,
    ToolDefinitionError,
    TransitionError,
    define_tool,
    wrap_tools,
)
from undo_core.vocabulary.states import check_saga_transition, check_step_transition

# ---------------------------------------------------------------- define_tool


def test_define_tool_keeps_what_it_was_given() -> None:
    def execute(x: Any) -> Any:
        return x

    def undo(out: Any, x: Any) -> None:
        return None

    tool = define_tool(
        "refund_payment",
        execute,
        undo,
        requires_approval=True,
        reversibility="partial",
        undo_timeout=5,
        description="Issue a refund",
    )
    assert tool.name == "refund_payment" and tool.execute is execute and tool.undo is undo
    assert tool.requires_approval and tool.reversibility is Reversibility.PARTIAL
    assert tool.has_undo and not tool.is_async and tool.undo_retry == RetryPolicy()
    assert define_tool("x", execute).has_undo is False


@pytest.mark.parametrize("name", ["", "   ", None, 3])
def test_define_tool_rejects_an_empty_or_non_string_name(name: Any) -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        define_tool(name, lambda x: x)


def test_define_tool_rejects_non_callables_and_bad_options() -> None:
    with pytest.raises(TypeError, match="execute must be callable"):
        define_tool("t", "not a function")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="undo must be callable"):
        define_tool("t", lambda x: x, 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="input as its first argument"):
        define_tool("t", lambda: None)
    with pytest.raises(ToolDefinitionError, match="reversibility"):
        define_tool("t", lambda x: x, reversibility="sometimes")
    with pytest.raises(ToolDefinitionError, match="undo_timeout"):
        define_tool("t", lambda x: x, undo_timeout=0)


def test_an_undo_taking_only_the_output_gets_the_output() -> None:
    seen: list[Any] = []
    saga = Saga()
    saga.execute(define_tool("refund", lambda x: {"id": "re_9"}, seen.append), {"c": 1})
    saga.rollback()
    assert seen == [{"id": "re_9"}]


def test_async_functions_make_async_tools() -> None:
    async def execute(x: Any) -> Any:
        return x

    assert define_tool("a", execute).is_async
    assert define_tool("b", lambda x: x, execute).is_async  # an async undo is enough
    assert define_tool("c", lambda x: x).is_async is False


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"initial_interval": -1}, {"backoff": 0.5}, {"jitter": 2}],
)
def test_retry_policy_rejects_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="RetryPolicy"):
        RetryPolicy(**kwargs)


def test_retry_policy_delays_grow_and_are_capped() -> None:
    policy = RetryPolicy(initial_interval=1, backoff=3, max_interval=5, jitter=0)
    assert [policy.delay(n) for n in (1, 2, 3)] == [1, 3, 5]
    jittery = RetryPolicy(initial_interval=1, jitter=0.5)
    assert all(1 <= jittery.delay(1) <= 1.5 for _ in range(50))


# ---------------------------------------------------------------- wrap_tools


def test_wrap_tools_records_each_call_and_rolls_back_on_failure() -> None:
    undone: list[str] = []
    wrapped = wrap_tools(
        {
            "return_item": define_tool(
                "return_item", lambda x: x["itemId"], lambda o, x: undone.append(o)
            ),
            "refund": define_tool("refund", lambda x: 1 / 0),
        },
        name="storebot",
    )
    assert wrapped.execute.return_item({"itemId": "882"}) == "882"
    with pytest.raises(SagaRollbackError, match='"step-2" \\(refund\\)'):
        wrapped.execute.refund({"chargeId": "ch_1"})
    assert undone == ["882"]
    assert wrapped.saga.status is SagaStatus.ROLLED_BACK and wrapped.saga.name == "storebot"
    with pytest.raises(AttributeError, match="wrapped tools: refund, return_item"):
        wrapped.execute.ship  # noqa: B018


def test_wrap_tools_uses_an_async_saga_for_async_tools() -> None:
    async def work(x: Any) -> Any:
        return x * 2

    wrapped = wrap_tools({"work": define_tool("work", work)})
    assert isinstance(wrapped.saga, AsyncSaga)
    assert asyncio.run(wrapped.execute.work(21)) == 42


def test_wrap_tools_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="non-empty mapping"):
        wrap_tools({})
    with pytest.raises(TypeError, match="not a Tool"):
        wrap_tools({"x": lambda x: x})  # type: ignore[dict-item]


# ---------------------------------------------------------------- states


def test_status_values_are_the_seeds_names() -> None:
    seed_saga = {"IN_PROGRESS", "COMPLETED", "FAILED", "ROLLED_BACK", "ROLLBACK_FAILED"}
    seed_step = {"PENDING", "COMPLETED", "FAILED", "ROLLED_BACK", "ROLLBACK_FAILED"}
    assert seed_saga <= {s.value for s in SagaStatus}
    assert seed_step <= {s.value for s in StepState}
    assert SagaStatus.ROLLED_BACK == "ROLLED_BACK"  # compares as the seed's string


def test_every_state_has_a_row_in_the_transition_tables() -> None:
    assert set(STEP_TRANSITIONS) == set(StepState)
    assert set(SAGA_TRANSITIONS) == set(SagaStatus)
    for table in (STEP_TRANSITIONS, SAGA_TRANSITIONS):
        for state, targets in table.items():
            assert state not in targets, f"{state} may not loop onto itself"


def test_the_tables_forbid_undoing_a_failed_step_and_reviving_ended_sagas() -> None:
    with pytest.raises(TransitionError, match="FAILED to COMPENSATING"):
        check_step_transition(StepState.FAILED, StepState.COMPENSATING, step_id="s")
    with pytest.raises(TransitionError, match="ROLLED_BACK to COMPENSATING"):
        check_step_transition(StepState.ROLLED_BACK, StepState.COMPENSATING, step_id="s")
    with pytest.raises(TransitionError, match="ROLLED_BACK to IN_PROGRESS"):
        check_saga_transition(SagaStatus.ROLLED_BACK, SagaStatus.IN_PROGRESS, saga_id="x")
    check_step_transition(StepState.ROLLBACK_FAILED, StepState.COMPENSATING, step_id="s")


# ---------------------------------------------------------------- public API


FIXED_NAMES = {
    "define_tool",
    "Tool",
    "Saga",
    "AsyncSaga",
    "SagaStatus",
    "StepState",
    "SagaRollbackError",
    "wrap_tools",
    "define_saga",
    "SagaStore",
    "MemoryStore",
    "SQLiteStore",
    "recover",
}


def test_the_fixed_public_names_are_exported() -> None:
    assert set(undo_core.__all__) >= FIXED_NAMES
    for name in undo_core.__all__:
        assert hasattr(undo_core, name), name


def test_the_saga_methods_have_their_fixed_names() -> None:
    for cls in (Saga, AsyncSaga):
        for method in (
            "execute",
            "add_step",
            "mark_completed",
            "mark_failed",
            "rollback",
            "complete",
            "retry_compensation",
            "resolve",
            "resume_rollback",
        ):
            assert callable(getattr(cls, method)), (cls, method)


@pytest.mark.slow  # imports in a subprocess
def test_undo_core_imports_no_framework() -> None:
    code = (
        "import sys, undo_core, undo_core.testing; "
        "bad = [m for m in ('django', 'celery', 'channels', 'ninja', 'sagaboard', 'httpx') "
        "if m in sys.modules]; print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""

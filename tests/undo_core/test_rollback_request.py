"""A person's rollback request reaches the engine through its store, at a step boundary."""

from __future__ import annotations

import asyncio
import pickle
import threading
from typing import Any

import pytest

from undo_core import (
    AsyncSaga,
    MemoryStore,
    RollbackRequestedError,
    RollbackRequests,
    Saga,
    SagaClosedError,
    SagaRollbackError,
    SagaStatus,
    StepState,
    define_tool,
)


def tools(log: list[str]) -> list[Any]:
    def tool(n: int) -> Any:
        return define_tool(
            f"t{n}", lambda i: log.append(f"do:{n}"), lambda o, i: log.append(f"undo:{n}")
        )

    return [tool(n) for n in range(1, 4)]


def test_a_requested_rollback_runs_at_the_next_step_newest_first_instead_of_the_step() -> None:
    store = MemoryStore()
    assert isinstance(store, RollbackRequests)
    log: list[str] = []
    t1, t2, t3 = tools(log)
    saga = Saga("order", store=store)
    saga.execute(t1)
    saga.execute(t2)
    store.request_rollback(saga.id, by="user:ann", reason="wrong customer")
    with pytest.raises(RollbackRequestedError) as err:
        saga.execute(t3)
    assert log == ["do:1", "do:2", "undo:2", "undo:1"]
    assert saga.status is SagaStatus.ROLLED_BACK
    assert [s.state for s in saga.steps] == [StepState.ROLLED_BACK, StepState.ROLLED_BACK]
    e = err.value
    assert isinstance(e, SagaRollbackError) and e.cause is None and e.failed_step is None
    assert (e.requested_by, e.reason, e.rolled_back) == (
        "user:ann", "wrong customer", ("step-2", "step-1"),
    )  # fmt: skip
    assert "requested by user:ann: wrong customer" in str(e)
    moved = [ev for ev in store.events(saga.id) if ev.step_id is None and ev.to_state]
    assert any(ev.to_state == "COMPENSATING" and ev.actor == "user:ann" for ev in moved)
    again = pickle.loads(pickle.dumps(e))
    assert (again.requested_by, again.rolled_back) == ("user:ann", ("step-2", "step-1"))


def test_a_saga_used_as_a_context_manager_rolls_back_once_and_the_error_propagates() -> None:
    store = MemoryStore()
    log: list[str] = []
    t1, t2, _ = tools(log)
    with pytest.raises(RollbackRequestedError), Saga("order", store=store) as saga:
        saga.execute(t1)
        store.request_rollback(saga.id, by="user:ann", reason="stop")
        saga.execute(t2)
    assert log == ["do:1", "undo:1"] and saga.status is SagaStatus.ROLLED_BACK


def test_it_rolls_back_even_without_auto_rollback_and_a_later_step_is_refused() -> None:
    store = MemoryStore()
    log: list[str] = []
    t1, t2, _ = tools(log)
    saga = Saga("order", store=store, auto_rollback_on_failure=False)
    saga.execute(t1)
    store.request_rollback(saga.id, by="ops", reason="")
    with pytest.raises(RollbackRequestedError):
        saga.execute(t2)
    with pytest.raises(SagaClosedError):
        saga.execute(t2)
    assert log == ["do:1", "undo:1"]


def test_a_request_from_another_thread_while_a_step_runs_is_heard_after_it() -> None:
    store = MemoryStore()
    log: list[str] = []
    _, t2, _ = tools(log)
    saga = Saga("order", store=store)
    asked = threading.Event()

    def slow(i: Any) -> None:
        threading.Thread(
            target=lambda: (store.request_rollback(saga.id, by="ann", reason="x"), asked.set())
        ).start()
        asked.wait(5)
        log.append("do:slow")

    saga.execute(define_tool("slow", slow, lambda o, i: log.append("undo:slow")))
    with pytest.raises(RollbackRequestedError):
        saga.execute(t2)
    assert log == ["do:slow", "undo:slow"]


def test_no_request_changes_nothing_and_other_sagas_of_the_store_run_on() -> None:
    store = MemoryStore()
    log: list[str] = []
    t1, t2, _ = tools(log)
    stopped, other = Saga("a", store=store), Saga("b", store=store)
    stopped.execute(t1)
    store.request_rollback(stopped.id, by="ann", reason="x")
    other.execute(t1)
    other.execute(t2)
    other.complete()
    assert other.status is SagaStatus.COMPLETED and store.rollback_requested(other.id) is None


def test_an_async_saga_hears_it_too() -> None:
    store = MemoryStore()
    log: list[str] = []
    t1, t2, _ = tools(log)

    async def run() -> None:
        saga = AsyncSaga("order", store=store)
        await saga.execute(t1)
        store.request_rollback(saga.id, by="ann", reason="x")
        with pytest.raises(RollbackRequestedError):
            await saga.execute(t2)
        assert saga.status is SagaStatus.ROLLED_BACK

    asyncio.run(run())
    assert log == ["do:1", "undo:1"]

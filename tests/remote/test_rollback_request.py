"""SagaboardStore hears an operator's rollback request; the engine rolls back at its next step."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.remote.conftest import FakeSagaboard
from undo_core import (
    AsyncSaga,
    RollbackRequest,
    RollbackRequestedError,
    RollbackRequests,
    Saga,
    SagaRollbackError,
    SagaStatus,
    define_tool,
)

ASKED = {"by": "user:ann", "reason": "wrong customer", "at": "2026-12-02T13:00:00+00:00"}


def tools(log: list[str]) -> list[Any]:
    def tool(n: int) -> Any:
        return define_tool(
            f"t{n}", lambda i: log.append(f"do:{n}"), lambda o, i: log.append(f"undo:{n}")
        )

    return [tool(n) for n in range(1, 5)]


def wait_until(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_answer_to_its_events_carries_the_request_and_the_next_step_rolls_back(
    fake: FakeSagaboard, make_store: Any
) -> None:
    store = make_store()
    assert isinstance(store, RollbackRequests)
    log: list[str] = []
    t1, t2, t3, _ = tools(log)
    saga = Saga("order", store=store)
    saga.execute(t1)
    fake.rollback_requests[saga.id] = ASKED
    saga.execute(t2)
    assert store.flush(timeout=5)  # the answer to step 2's events says it
    heard = store.rollback_requested(saga.id)
    assert heard == RollbackRequest(by="user:ann", reason="wrong customer", at=heard.at)
    assert heard.at is not None and heard.at.year == 2026
    with pytest.raises(RollbackRequestedError) as err:
        saga.execute(t3)
    assert log == ["do:1", "do:2", "undo:2", "undo:1"]  # t3 never ran; LIFO
    assert isinstance(err.value, SagaRollbackError)  # handled like any rollback
    assert (err.value.requested_by, err.value.reason) == ("user:ann", "wrong customer")
    assert err.value.status == SagaStatus.ROLLED_BACK and err.value.cause is None
    assert err.value.rolled_back == ("step-2", "step-1")
    assert store.flush(timeout=5)
    moves = [(e["saga"]["status"], e["event"].get("actor")) for e in fake.applied]
    assert ("COMPENSATING", "user:ann") in moves
    assert fake.sagas[saga.id]["status"] == "ROLLED_BACK"
    assert store.rollback_requested(saga.id) is None  # the saga has ended: forgotten


def test_while_a_long_step_runs_the_idle_sender_asks_and_hears_it(
    fake: FakeSagaboard, make_store: Any
) -> None:
    store = make_store(rollback_poll=0.05)
    log: list[str] = []
    t1, t2, _, _ = tools(log)
    saga = Saga("order", store=store)
    saga.execute(t1)
    assert store.flush(timeout=5)

    def long_step(i: Any) -> None:  # the operator asks while it runs
        assert store.flush(timeout=5)  # this step's first event is answered: nothing asked
        fake.rollback_requests[saga.id] = ASKED
        wait_until(lambda: store.rollback_requested(saga.id) is not None)

    saga.execute(define_tool("long", long_step, lambda o, i: log.append("undo:long")))
    with pytest.raises(RollbackRequestedError):
        saga.execute(t2)
    assert log == ["do:1", "undo:long", "undo:1"]
    assert any(r.path == "/api/v1/rollback-requests" for r in fake.requests)


def test_without_running_sagas_or_with_polling_off_it_never_asks(
    fake: FakeSagaboard, make_store: Any
) -> None:
    store = make_store(rollback_poll=None)
    saga = Saga("order", store=store)
    saga.execute(tools([])[0])
    time.sleep(0.2)
    idle = make_store(rollback_poll=0.01)
    time.sleep(0.1)
    assert not any(r.path == "/api/v1/rollback-requests" for r in fake.requests)
    assert store.rollback_requested(saga.id) is None and idle.stats()["sent"] == 0


def test_an_async_saga_hears_it_the_same_way(fake: FakeSagaboard, make_store: Any) -> None:
    import asyncio

    store = make_store()
    log: list[str] = []
    t1, t2, t3, _ = tools(log)

    async def run() -> RollbackRequestedError:
        saga = AsyncSaga("order", store=store)
        await saga.execute(t1)
        fake.rollback_requests[saga.id] = ASKED
        await saga.execute(t2)
        await store.aflush(timeout=5)
        with pytest.raises(RollbackRequestedError) as err:
            await saga.execute(t3)
        return err.value

    err = asyncio.run(run())
    assert log == ["do:1", "do:2", "undo:2", "undo:1"] and err.requested_by == "user:ann"


def test_an_unreadable_answer_is_logged_and_the_saga_goes_on(make_store: Any, caplog: Any) -> None:
    import httpx

    store = make_store()
    log: list[str] = []
    t1, t2, _, _ = tools(log)
    saga = Saga("order", store=store)
    saga.execute(t1)
    bad = httpx.Response(200, json={"results": [], "rollback_requested": ["nonsense"]})
    with caplog.at_level("WARNING", logger="undo_core.remote"):
        store._sender.hear(bad)
    saga.execute(t2)
    assert log == ["do:1", "do:2"] and "unreadable rollback requests" in caplog.text

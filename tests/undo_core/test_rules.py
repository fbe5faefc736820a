"""undo_core.stores.rules: the one function that decides whether a stored change is legal,
and replay.

The engine passes every change it makes through ``check_change``; replaying what a
store received gives exactly what the store holds, and a rewritten change is
refused with the rule and the field it breaks.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from undo_core import (
    ChangeRefused,
    Decision,
    MemoryStore,
    RetryPolicy,
    Saga,
    SagaChange,
    SagaRollbackError,
    TransitionError,
    check_change,
    define_tool,
    replay,
)


class Recording(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.changes: list[SagaChange] = []

    def apply(self, change: SagaChange) -> None:
        super().apply(change)
        self.changes.append(change)


class Leave:
    def approve_compensation(self, request: Any) -> Decision:
        return Decision.wait()

    def compensation_failed(self, request: Any) -> Decision:
        return Decision.leave()


def failed_rollback(store: Recording) -> Saga:
    """return_item's undo fails twice (a retry, then ROLLBACK_FAILED); the saga halts."""
    saga = Saga(
        "storebot", store=store, saga_id="s-1", gate=Leave(), on_compensation_failure="halt"
    )

    def undo(output: Any, given: Any) -> None:
        raise TimeoutError("upstream timed out")

    retry = RetryPolicy(max_attempts=2, initial_interval=0, jitter=0)
    saga.execute(define_tool("return_item", lambda i: {"rma": 1}, undo, undo_retry=retry), {})
    saga.execute(define_tool("refund", lambda i: {"id": "re_1"}, lambda o: None), {"n": 120})

    def fedex(given: Any) -> None:
        raise ConnectionError("FedEx API returned 500")

    with pytest.raises(SagaRollbackError):
        saga.execute(define_tool("label", fedex), {})
    return saga


def test_replaying_what_a_store_received_gives_what_it_holds() -> None:
    store = Recording()
    saga = failed_rollback(store)
    assert saga.status == "ROLLBACK_FAILED"
    assert {c.event.kind for c in store.changes} == {"saga", "step", "attempt"}
    replayed = replay(store.changes)
    held = store.load("s-1")
    assert replayed is not None and held is not None
    assert replayed.steps == held.steps
    assert replayed.record._replace(lease_owner=None, lease_expires_at=None) == held.record
    assert replay([]) is None


def test_a_rewritten_change_does_not_replay_and_names_its_rule_and_field() -> None:
    store = Recording()
    failed_rollback(store)
    changes = list(store.changes)
    last = changes[-1]  # COMPENSATING -> ROLLBACK_FAILED
    flipped = last._replace(
        saga=last.saga._replace(status="ROLLED_BACK"),
        event=last.event._replace(to_state="ROLLED_BACK"),
    )
    with pytest.raises(ChangeRefused) as refused:
        replay([*changes[:-1], flipped])
    assert (refused.value.rule, refused.value.field) == ("illegal_transition", "event.to_state")
    completed = next(c for c in changes if c.event.to_state == "COMPLETED")
    index = changes.index(completed)
    renamed = completed._replace(
        step=completed.step._replace(tool_name="wire_money"),  # type: ignore[union-attr]
        event=completed.event._replace(tool_name="wire_money"),
    )
    with pytest.raises(ChangeRefused) as refused:
        replay([*changes[:index], renamed])
    assert (refused.value.rule, refused.value.field) == ("fixed_field", "step.tool_name")


def test_a_move_the_tables_forbid_is_a_transition_error_and_refusals_pickle() -> None:
    store = Recording()
    failed_rollback(store)
    saga_created = store.changes[0]
    again = saga_created._replace(
        saga=saga_created.saga._replace(seq=99), event=saga_created.event._replace(seq=99)
    )
    with pytest.raises(ChangeRefused) as refused:
        check_change(store.changes[-1].saga, None, again)
    assert refused.value.rule == "conflict" and isinstance(refused.value, TransitionError)
    copy = pickle.loads(pickle.dumps(refused.value))
    assert (copy.rule, copy.field, str(copy)) == ("conflict", "saga.id", str(refused.value))


def test_the_step_limit_counts_the_steps_already_stored() -> None:
    store = Recording()
    saga = Saga("many", store=store)
    tool = define_tool("t", lambda i: i)
    for n in range(3):
        saga.execute(tool, n)
    assert replay(store.changes, max_steps=3) is not None
    with pytest.raises(ChangeRefused) as refused:
        replay(store.changes, max_steps=2)
    assert (refused.value.rule, refused.value.field) == ("limit_exceeded", "step.id")

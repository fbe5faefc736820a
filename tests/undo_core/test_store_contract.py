"""One contract for every :class:`SagaStore`: ``MemoryStore`` and ``SQLiteStore`` behave alike.

Each contract test runs against both stores through the public API. The tests
after them pin what only the SQLite store does (JSON, WAL, several connections
on one file).
"""

from __future__ import annotations

import itertools
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from undo_core import (
    AttemptOutcome,
    ExecuteContext,
    LeaseError,
    RetryPolicy,
    Saga,
    SagaChange,
    SagaRollbackError,
    SagaSnapshot,
    SagaStatus,
    SagaStore,
    SerializationError,
    SQLiteStore,
    StepState,
    StoreError,
    define_tool,
    recover,
)
from undo_core.testing import FakeClock

OWNER_A = "host-a:1:aaaa"
OWNER_B = "host-b:2:bbbb"
OWNER_C = "host-c:3:cccc"


class Crash(BaseException):
    """Stands in for the process dying: the engine does not catch it."""


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "sagas.db"


class Ledger:
    """What the tools did, in order: ("do" | "undo", tool name, input)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def tool(self, name: str, *, fail: bool = False, undo: bool = True) -> Any:
        def execute(input: Any) -> Any:
            self.calls.append(("do", name, input))
            if fail:
                raise RuntimeError(f"{name} failed")
            return {"made_by": name, "input": input}

        def undo_fn(output: Any, input: Any) -> None:
            self.calls.append(("undo", name, input))

        return define_tool(name, execute, undo_fn if undo else None)

    def ran(self, op: str, name: str) -> int:
        return sum(1 for o, n, _ in self.calls if (o, n) == (op, name))

    def undone(self) -> list[str]:
        return [n for o, n, _ in self.calls if o == "undo"]


def seqs(store: Any, saga_id: str) -> list[int]:
    """Event sequence numbers (MemoryStore keeps SagaEvent objects, SQLiteStore dicts)."""
    return [e["seq"] if isinstance(e, dict) else e.seq for e in store.events(saga_id)]


def loaded(store: SagaStore, saga_id: str) -> SagaSnapshot:
    snapshot = store.load(saga_id)
    assert snapshot is not None, f"saga {saga_id} is not in the store"
    return snapshot


def states(snapshot: SagaSnapshot) -> dict[str, StepState]:
    return {s.id: s.state for s in snapshot.steps}


def an_hour_from_now() -> datetime:
    return datetime.now(UTC) + timedelta(hours=1)


# ---------------------------------------------------------------- contract: round trip


def test_it_loads_back_a_saga_exactly_as_the_engine_left_it(store: SagaStore) -> None:
    ledger = Ledger()
    flaky_undo_calls: list[int] = []

    def flaky_undo(output: Any, input: Any) -> None:
        flaky_undo_calls.append(1)
        if len(flaky_undo_calls) == 1:
            raise ConnectionError("first undo attempt fails")

    flaky = define_tool(
        "flaky",
        lambda input: {"ticket": input["n"] * 10, "tags": ["a", "b"]},
        flaky_undo,
        undo_retry=RetryPolicy(max_attempts=2, initial_interval=0),
    )
    saga = Saga("round-trip", store=store, clock=FakeClock(), owner=OWNER_A)
    assert saga.execute(ledger.tool("first"), {"n": 1}) == {"made_by": "first", "input": {"n": 1}}
    saga.execute(flaky, {"n": 2})
    saga.execute(ledger.tool("no-undo", undo=False), [1, 2, 3])
    with pytest.raises(SagaRollbackError):
        saga.execute(ledger.tool("boom", fail=True), {"n": 4})

    back = loaded(store, saga.id)
    assert back == saga.snapshot()  # every field of the record and of every step
    assert back.status is SagaStatus.ROLLED_BACK
    assert [s.id for s in back.steps] == ["step-1", "step-2", "step-3", "step-4"]
    assert [s.position for s in back.steps] == [0, 1, 2, 3]
    assert [s.tool_name for s in back.steps] == ["first", "flaky", "no-undo", "boom"]
    assert states(back) == {
        "step-1": StepState.ROLLED_BACK,
        "step-2": StepState.ROLLED_BACK,
        "step-3": StepState.COMPLETED,  # no undo: its effect remains, and is reported
        "step-4": StepState.FAILED,
    }
    assert back.steps[1].output == {"ticket": 20, "tags": ["a", "b"]}
    assert back.steps[3].error == "boom failed"
    assert back.steps[3].error_type == "RuntimeError"
    attempts = back.steps[1].compensation_attempts
    assert [(a.number, a.outcome) for a in attempts] == [
        (1, AttemptOutcome.FAILED),
        (2, AttemptOutcome.SUCCEEDED),
    ]
    assert attempts[0].error == "first undo attempt fails"
    assert back.record.failed_step == "step-4"


def test_it_round_trips_unicode_and_markup_unchanged(store: SagaStore) -> None:
    nasty = {
        "html": "<script>alert('pwned')</script>",
        "text": "naïve café — 中文 — 😀 — \u202eRTL",
        "quotes": 'it\'s "quoted" \\ back\\slash',
        "control": "tab\tnewline\nnul\x00end",
    }
    echo = define_tool("écho <b>", lambda input: {"echo": input}, lambda out, inp: None)
    saga = Saga("saga «ünïcode» <i>", store=store, owner=OWNER_A)
    saga.execute(echo, nasty)

    step = loaded(store, saga.id).steps[0]
    assert step.input == nasty
    assert step.output == {"echo": nasty}
    assert step.tool_name == "écho <b>"
    assert loaded(store, saga.id).record.name == "saga «ünïcode» <i>"


def test_it_numbers_each_sagas_events_strictly_increasing(store: SagaStore) -> None:
    ledger = Ledger()
    clock = FakeClock()
    saga = Saga("events", store=store, clock=clock, owner=OWNER_A)
    saga.execute(ledger.tool("a"), 1)
    saga.execute(ledger.tool("b"), 2)
    saga.execute(ledger.tool("c"), 3)
    # the process "dies" here; recovery in another process continues the sequence
    clock.advance(301)
    recover(store, [ledger.tool("a"), ledger.tool("b"), ledger.tool("c")], clock=clock)

    numbers = seqs(store, saga.id)
    assert len(numbers) > 8
    assert all(earlier < later for earlier, later in itertools.pairwise(numbers))
    assert numbers[-1] == loaded(store, saga.id).record.seq


# ---------------------------------------------------------------- contract: PENDING first


def test_it_holds_a_step_as_pending_while_its_tool_runs(store: SagaStore) -> None:
    seen: list[tuple[StepState, Any, int]] = []

    def execute(input: Any, ctx: ExecuteContext) -> str:
        snapshot = loaded(store, ctx.saga_id)
        step = next(s for s in snapshot.steps if s.id == ctx.step_id)
        seen.append((step.state, step.input, len(snapshot.steps)))
        return "done"

    saga = Saga("pending-first", store=store, owner=OWNER_A)
    saga.execute(define_tool("first", lambda x: x, lambda o, i: None), 1)
    saga.execute(define_tool("probe", execute, lambda o, i: None), {"k": "v"})

    assert seen == [(StepState.PENDING, {"k": "v"}, 2)]
    assert states(loaded(store, saga.id))["step-2"] is StepState.COMPLETED


# ---------------------------------------------------------------- contract: list_unfinished


def test_it_lists_only_in_progress_and_compensating_sagas_oldest_first(store: SagaStore) -> None:
    ledger = Ledger()
    clock = FakeClock()

    def new_saga(name: str, **options: Any) -> Saga:
        clock.advance(1)
        return Saga(name, store=store, clock=clock, owner=OWNER_A, **options)

    compensating = new_saga("compensating")
    compensating.execute(ledger.tool("x"), 1)

    def crashing_undo(output: Any, input: Any) -> None:
        raise Crash

    compensating.execute(define_tool("crashes-in-undo", lambda i: i, crashing_undo), 2)
    with pytest.raises(Crash):
        compensating.execute(ledger.tool("boom", fail=True), 3)

    in_progress = new_saga("in-progress")
    in_progress.execute(ledger.tool("x"), 1)

    with new_saga("completed") as completed:
        completed.execute(ledger.tool("x"), 1)
    rolled_back = new_saga("rolled-back")
    rolled_back.execute(ledger.tool("x"), 1)
    rolled_back.rollback()
    failed = new_saga("failed", auto_rollback_on_failure=False)
    with pytest.raises(RuntimeError):
        failed.execute(ledger.tool("boom", fail=True), 1)
    rollback_failed = new_saga("rollback-failed")
    rollback_failed.execute(define_tool("bad-undo", lambda i: i, lambda o, i: 1 / 0), 1)
    rollback_failed.rollback()

    assert loaded(store, compensating.id).status is SagaStatus.COMPENSATING
    assert loaded(store, failed.id).status is SagaStatus.FAILED
    assert loaded(store, rollback_failed.id).status is SagaStatus.ROLLBACK_FAILED
    assert store.list_unfinished() == [compensating.id, in_progress.id]


# ---------------------------------------------------------------- contract: leases


def test_acquire_lease_is_compare_and_set(store: SagaStore) -> None:
    saga = Saga("leased", store=store, owner=OWNER_A)
    saga.execute(Ledger().tool("x"), 1)
    expires = an_hour_from_now()

    assert store.acquire_lease(saga.id, OWNER_B, expires, expected_owner=OWNER_A)
    # C read the owner before B took it: its expectation is stale, so it loses
    assert not store.acquire_lease(saga.id, OWNER_C, expires, expected_owner=OWNER_A)
    assert not store.acquire_lease(saga.id, OWNER_C, expires, expected_owner=None)
    record = loaded(store, saga.id).record
    assert record.lease_owner == OWNER_B
    assert record.lease_expires_at == expires

    # the holder may renew whatever it expected
    later = expires + timedelta(minutes=5)
    assert store.acquire_lease(saga.id, OWNER_B, later, expected_owner=OWNER_A)
    assert loaded(store, saga.id).record.lease_expires_at == later

    assert not store.acquire_lease("no-such-saga", OWNER_C, expires, expected_owner=None)


def test_only_the_owner_can_release_a_lease(store: SagaStore) -> None:
    saga = Saga("leased", store=store, owner=OWNER_A)
    saga.execute(Ledger().tool("x"), 1)

    store.release_lease(saga.id, OWNER_B)
    assert loaded(store, saga.id).record.lease_owner == OWNER_A

    store.release_lease(saga.id, OWNER_A)
    record = loaded(store, saga.id).record
    assert (record.lease_owner, record.lease_expires_at) == (None, None)
    assert store.acquire_lease(saga.id, OWNER_C, an_hour_from_now(), expected_owner=None)
    assert loaded(store, saga.id).record.lease_owner == OWNER_C


def test_a_process_that_lost_its_lease_cannot_write(store: SagaStore) -> None:
    ledger = Ledger()
    saga = Saga("fenced", store=store, owner=OWNER_A)
    saga.execute(ledger.tool("first"), 1)
    assert store.acquire_lease(saga.id, OWNER_B, an_hour_from_now(), expected_owner=OWNER_A)
    before = loaded(store, saga.id)

    with pytest.raises(LeaseError):
        saga.execute(ledger.tool("second"), 2)
    with pytest.raises(LeaseError):
        saga.rollback()

    assert ledger.calls == [("do", "first", 1)]  # "second" never ran, nothing was undone
    assert loaded(store, saga.id) == before


def test_a_presumed_dead_owner_cannot_overwrite_a_recovered_saga(store: SagaStore) -> None:
    ledger = Ledger()
    clock = FakeClock()
    tools = [ledger.tool("first"), ledger.tool("second")]
    zombie = Saga("stalled", store=store, clock=clock, owner=OWNER_A)
    zombie.execute(tools[0], 1)

    # A stalls past its lease; B recovers the saga, then lets go of the lease.
    clock.advance(301)
    [result] = recover(store, tools, owner=OWNER_B, clock=clock)
    assert result.status is SagaStatus.ROLLED_BACK
    recovered = loaded(store, zombie.id)
    assert recovered.record.lease_owner is None

    # A wakes up and carries on: every write it tries is refused.
    with pytest.raises(LeaseError):
        zombie.execute(tools[1], 2)
    with pytest.raises(LeaseError):
        zombie.rollback()

    assert ledger.ran("do", "second") == 0
    assert ledger.ran("undo", "first") == 1
    assert loaded(store, zombie.id) == recovered


# ---------------------------------------------------------------- contract: failed writes


class FailingPendingStore:
    """Wraps a store; refuses the PENDING write of one tool's step, like a full disk."""

    def __init__(self, inner: SagaStore, tool_name: str) -> None:
        self.inner = inner
        self.tool_name = tool_name
        self.error = StoreError("disk full while writing the PENDING step")

    def apply(self, change: SagaChange) -> None:
        step = change.step
        if (
            step is not None
            and step.state is StepState.PENDING
            and step.tool_name == self.tool_name
        ):
            raise self.error
        self.inner.apply(change)

    def load(self, saga_id: str) -> SagaSnapshot | None:
        return self.inner.load(saga_id)

    def list_unfinished(self) -> list[str]:
        return self.inner.list_unfinished()

    def acquire_lease(
        self, saga_id: str, owner: str, expires_at: datetime, *, expected_owner: str | None
    ) -> bool:
        return self.inner.acquire_lease(saga_id, owner, expires_at, expected_owner=expected_owner)

    def release_lease(self, saga_id: str, owner: str) -> None:
        self.inner.release_lease(saga_id, owner)


def test_a_failed_pending_write_fails_the_step_before_its_tool_runs(store: SagaStore) -> None:
    ledger = Ledger()
    failing = FailingPendingStore(store, "unwritable")
    assert isinstance(failing, SagaStore)
    saga = Saga("disk-full", store=failing, owner=OWNER_A)
    saga.execute(ledger.tool("first"), 1)
    saga.execute(ledger.tool("second"), 2)

    with pytest.raises(SagaRollbackError) as caught:
        saga.execute(ledger.tool("unwritable"), 3)

    err = caught.value
    assert err.cause is failing.error
    assert err.__cause__ is failing.error
    assert err.failed_step == "step-3"
    assert ledger.ran("do", "unwritable") == 0
    assert ledger.undone() == ["second", "first"]
    assert saga.status is SagaStatus.ROLLED_BACK
    back = loaded(store, saga.id)
    assert back.status is SagaStatus.ROLLED_BACK
    assert states(back) == {"step-1": StepState.ROLLED_BACK, "step-2": StepState.ROLLED_BACK}


# ---------------------------------------------------------------- SQLite only


def test_sqlite_refuses_a_non_json_input_naming_the_step_and_rolls_back(
    sqlite_path: Path,
) -> None:
    ledger = Ledger()
    with SQLiteStore(sqlite_path) as store:
        saga = Saga("not-json", store=store)
        saga.execute(ledger.tool("first"), 1)

        with pytest.raises(SagaRollbackError) as caught:
            saga.execute(ledger.tool("send_email"), {"when": object()})

        cause = caught.value.cause
        assert isinstance(cause, SerializationError)
        assert isinstance(cause, TypeError)
        assert "step-2" in str(cause)
        assert "send_email" in str(cause)
        assert "input" in str(cause)
        assert ledger.ran("do", "send_email") == 0
        assert ledger.undone() == ["first"]
        back = loaded(store, saga.id)
        assert back.status is SagaStatus.ROLLED_BACK
        assert states(back) == {"step-1": StepState.ROLLED_BACK}


def test_sqlite_a_non_json_output_still_undoes_that_step_and_the_earlier_ones(
    sqlite_path: Path,
) -> None:
    undone: list[str] = []
    first = define_tool("first", lambda x: "ok", lambda out, x: undone.append("first"))
    odd = define_tool("odd_output", lambda x: object(), lambda out, x: undone.append("odd"))
    with SQLiteStore(sqlite_path) as store:
        saga = Saga("odd", store=store)
        saga.execute(first, 1)
        with pytest.raises(SagaRollbackError) as caught:
            saga.execute(odd, 2)

        assert isinstance(caught.value.cause, SerializationError)
        assert "output of step 'step-2' (odd_output)" in str(caught.value.cause)
        assert undone == ["odd", "first"]  # the step ran, so it is undone too, newest first
        assert saga.status is SagaStatus.ROLLED_BACK
        assert loaded(store, saga.id).status is SagaStatus.ROLLED_BACK


def test_sqlite_store_runs_in_wal_mode(sqlite_path: Path) -> None:
    with SQLiteStore(sqlite_path):
        pass
    db = sqlite3.connect(sqlite_path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()


def test_two_sqlite_stores_on_one_file_see_each_others_writes(sqlite_path: Path) -> None:
    with SQLiteStore(sqlite_path) as one, SQLiteStore(sqlite_path) as two:
        saga = Saga("shared", store=one, owner=OWNER_A)
        saga.execute(Ledger().tool("x"), {"v": 1})

        seen_by_two = loaded(two, saga.id)
        assert seen_by_two == saga.snapshot()
        assert two.list_unfinished() == [saga.id]

        assert two.acquire_lease(saga.id, OWNER_B, an_hour_from_now(), expected_owner=OWNER_A)
        assert loaded(one, saga.id).record.lease_owner == OWNER_B
        # the lease taken through `two` fences the saga writing through `one`
        with pytest.raises(LeaseError):
            saga.execute(Ledger().tool("y"), 2)
        assert [s.id for s in loaded(two, saga.id).steps] == ["step-1"]


def test_a_sqlite_store_in_a_folder_that_does_not_exist_yet_gets_its_folder(
    tmp_path: Path,
) -> None:
    from undo_core import SQLiteStore, StoreError

    store = SQLiteStore(tmp_path / "var" / "agent-sagas.sqlite3")  # docs/engine.md's path
    store.close()
    assert (tmp_path / "var" / "agent-sagas.sqlite3").is_file()
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file where the folder should be")
    with pytest.raises(StoreError, match=r"cannot create the folder .*notes\.txt"):
        SQLiteStore(blocker / "sagas.sqlite3")
    with pytest.raises(StoreError, match="is a folder: give a file path inside it"):
        SQLiteStore(tmp_path)

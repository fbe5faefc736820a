"""Crash recovery: a new process rolls back what a dead one left half done.

The first tests build the "dead process" state in this process: a saga whose
lease names a pid that does not exist (or whose lease has expired), stopped
at a chosen point by raising :class:`Crash`, a ``BaseException`` the engine
does not catch. The ``slow`` tests at the end kill real processes with SIGKILL
(see ``crash_worker.py``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from undo_core import (
    AttemptOutcome,
    LeaseError,
    RecoveryResult,
    Saga,
    SagaEvent,
    SagaRollbackError,
    SagaSnapshot,
    SagaStatus,
    SagaStore,
    SQLiteStore,
    StepState,
    Tool,
    UndoContext,
    arecover,
    attach,
    define_saga,
    define_tool,
    recover,
)
from undo_core.testing import FakeClock

HERE = Path(__file__).parent
WORKER = HERE / "crash_worker.py"
REPO = HERE.parent.parent
WAIT_SECONDS = 10.0


class Crash(BaseException):
    """Stands in for the process dying: the engine does not catch it."""


def _load_worker() -> Any:
    spec = importlib.util.spec_from_file_location("undo_core_crash_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _load_worker()


def dead_owner() -> str:
    """A lease owner naming a process on this host that does not exist."""
    pid = 999_999
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"{socket.gethostname()}:{pid}:dead"
        except PermissionError:
            pass
        pid -= 1


# ---------------------------------------------------------------- fixtures and helpers


class Ledger:
    """Tools that record every execute and undo, with the undo's key and attempt."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.undo_contexts: dict[str, list[UndoContext]] = {}

    def tool(self, name: str, *, fail: bool = False, crash_in_undo: bool = False) -> Tool:
        def execute(input: Any) -> Any:
            self.calls.append(("do", name))
            if fail:
                raise RuntimeError(f"{name} failed")
            return {"made_by": name}

        def undo(output: Any, input: Any, ctx: UndoContext) -> None:
            self.calls.append(("undo", name))
            self.undo_contexts.setdefault(name, []).append(ctx)
            if crash_in_undo:
                raise Crash

        return define_tool(name, execute, undo)

    def tools(self, *names: str) -> list[Tool]:
        return [self.tool(n) for n in names]

    def undone(self) -> list[str]:
        return [n for op, n in self.calls if op == "undo"]


def crashing_tool(name: str) -> Tool:
    def execute(input: Any) -> Any:
        raise Crash

    return define_tool(name, execute, lambda out, inp: None)


def loaded(store: SagaStore, saga_id: str) -> SagaSnapshot:
    snapshot = store.load(saga_id)
    assert snapshot is not None
    return snapshot


def states(snapshot: SagaSnapshot) -> dict[str, StepState]:
    return {s.id: s.state for s in snapshot.steps}


def only(results: list[RecoveryResult]) -> RecoveryResult:
    assert len(results) == 1, results
    return results[0]


def abandoned_saga(store: SagaStore, ledger: Ledger, *names: str, **options: Any) -> Saga:
    """A saga whose owner died after completing one step per tool name."""
    saga = Saga("abandoned", store=store, owner=dead_owner(), **options)
    for number, name in enumerate(names, start=1):
        saga.execute(ledger.tool(name), {"n": number})
    return saga


# ---------------------------------------------------------------- in-process recovery


def test_recovery_rolls_back_an_in_progress_saga_newest_first(store: SagaStore) -> None:
    ledger = Ledger()
    saga = abandoned_saga(store, ledger, "a", "b", "c")

    result = only(recover(store, ledger.tools("a", "b", "c")))

    assert ledger.undone() == ["c", "b", "a"]
    assert (result.saga_id, result.saga_name) == (saga.id, "abandoned")
    assert result.status is SagaStatus.ROLLED_BACK
    assert result.report.rolled_back == ("step-3", "step-2", "step-1")
    assert result.in_doubt == ()
    back = loaded(store, saga.id)
    assert back.status is SagaStatus.ROLLED_BACK
    assert set(states(back).values()) == {StepState.ROLLED_BACK}
    assert back.record.lease_owner is None  # released for whoever comes next
    assert store.list_unfinished() == []


def test_recovery_never_reundoes_a_rolled_back_step(store: SagaStore) -> None:
    ledger = Ledger()

    def die_after_step_3_is_undone(event: SagaEvent) -> None:
        if event.step_id == "step-3" and event.to_state == StepState.ROLLED_BACK:
            raise Crash

    saga = Saga("dies-mid-rollback", store=store, owner=dead_owner())
    saga.execute(ledger.tool("a"), 1)
    saga.execute(ledger.tool("b"), 2)
    saga.execute(ledger.tool("c"), 3)
    saga.subscribe(die_after_step_3_is_undone)
    with pytest.raises(Crash):
        saga.execute(ledger.tool("boom", fail=True), 4)
    assert loaded(store, saga.id).status is SagaStatus.COMPENSATING
    assert ledger.undone() == ["c"]

    result = only(recover(store, ledger.tools("a", "b", "c", "boom")))

    assert ledger.undone() == ["c", "b", "a"]  # c's undo did not run a second time
    assert result.status is SagaStatus.ROLLED_BACK
    assert states(loaded(store, saga.id)) == {
        "step-1": StepState.ROLLED_BACK,
        "step-2": StepState.ROLLED_BACK,
        "step-3": StepState.ROLLED_BACK,
        "step-4": StepState.FAILED,
    }


def test_recovery_reruns_an_interrupted_undo_with_the_same_idempotency_key(
    store: SagaStore,
) -> None:
    ledger = Ledger()
    saga = Saga("dies-in-undo", store=store, owner=dead_owner())
    saga.execute(ledger.tool("a"), 1)
    saga.execute(ledger.tool("b", crash_in_undo=True), 2)
    saga.execute(ledger.tool("c"), 3)
    with pytest.raises(Crash):
        saga.execute(ledger.tool("boom", fail=True), 4)
    assert states(loaded(store, saga.id))["step-2"] is StepState.COMPENSATING

    result = only(recover(store, ledger.tools("a", "b", "c", "boom")))

    assert ledger.undone() == ["c", "b", "b", "a"]
    before_crash, after_crash = ledger.undo_contexts["b"]
    assert after_crash.idempotency_key == before_crash.idempotency_key == f"{saga.id}:step-2"
    assert (before_crash.attempt, after_crash.attempt) == (1, 2)
    assert result.status is SagaStatus.ROLLED_BACK
    step_2 = loaded(store, saga.id).steps[1]
    assert step_2.state is StepState.ROLLED_BACK
    assert [(a.number, a.outcome) for a in step_2.compensation_attempts] == [
        (1, AttemptOutcome.INTERRUPTED),
        (2, AttemptOutcome.SUCCEEDED),
    ]


def test_a_step_found_pending_is_in_doubt_and_fails_the_rollback(store: SagaStore) -> None:
    ledger = Ledger()
    saga = abandoned_saga(store, ledger, "a", "b")
    with pytest.raises(Crash):
        saga.execute(crashing_tool("charge_card"), 3)
    assert states(loaded(store, saga.id))["step-3"] is StepState.PENDING

    charge_undos: list[Any] = []
    charge = define_tool("charge_card", lambda x: x, lambda out, inp: charge_undos.append(out))
    result = only(recover(store, [*ledger.tools("a", "b"), charge]))

    assert charge_undos == []  # its effect may or may not exist: not assumed, not undone
    assert ledger.undone() == ["b", "a"]
    assert result.status is SagaStatus.ROLLBACK_FAILED
    assert result.in_doubt == ("step-3",)
    assert "step-3" in result.report.unresolved
    back = loaded(store, saga.id)
    assert back.status is SagaStatus.ROLLBACK_FAILED
    assert states(back) == {
        "step-1": StepState.ROLLED_BACK,
        "step-2": StepState.ROLLED_BACK,
        "step-3": StepState.IN_DOUBT,
    }
    assert "in doubt" in (back.steps[2].error or "")


def test_a_tool_missing_at_recovery_fails_the_rollback_naming_it(store: SagaStore) -> None:
    ledger = Ledger()
    saga = abandoned_saga(store, ledger, "a", "send_invoice", "c")

    result = only(recover(store, ledger.tools("a", "c")))

    assert ledger.undone() == ["c", "a"]
    assert result.status is SagaStatus.ROLLBACK_FAILED
    assert result.report.failed == ("step-2",)
    step_2 = loaded(store, saga.id).steps[1]
    assert step_2.state is StepState.ROLLBACK_FAILED
    assert "'send_invoice'" in (step_2.error or "")
    assert "not registered" in (step_2.error or "")
    assert loaded(store, saga.id).status is SagaStatus.ROLLBACK_FAILED


def test_recovery_leaves_a_saga_of_a_live_process_alone(store: SagaStore) -> None:
    ledger = Ledger()
    saga = Saga("alive", store=store)  # owned by this (live) process, lease unexpired
    saga.execute(ledger.tool("a"), 1)
    before = loaded(store, saga.id)

    assert recover(store, ledger.tools("a")) == []

    assert ledger.undone() == []
    assert loaded(store, saga.id) == before
    saga.execute(ledger.tool("b"), 2)  # its owner carries on undisturbed
    assert loaded(store, saga.id).status is SagaStatus.IN_PROGRESS


def test_recovery_takes_over_a_remote_saga_only_once_its_lease_expires(store: SagaStore) -> None:
    ledger = Ledger()
    clock = FakeClock()
    saga = Saga("remote", store=store, clock=clock, owner="another-host:4242:x", lease_seconds=60)
    saga.execute(ledger.tool("a"), 1)

    clock.advance(59)
    assert recover(store, ledger.tools("a"), clock=clock) == []
    assert ledger.undone() == []

    clock.advance(2)
    assert only(recover(store, ledger.tools("a"), clock=clock)).status is SagaStatus.ROLLED_BACK
    assert ledger.undone() == ["a"]


def test_recovery_skips_declarative_sagas(store: SagaStore) -> None:
    compensated: list[str] = []

    def crash(ctx: Any, state: Any) -> None:
        raise Crash

    definition = define_saga(
        name="declarative",
        steps=[
            {
                "name": "one",
                "run": lambda ctx, s: s.update(one=1),
                "compensate": lambda ctx, s: compensated.append("one"),
            },
            {"name": "two", "run": crash},
        ],
        store=store,
        owner=dead_owner(),
    )
    with pytest.raises(Crash):
        definition.run({}, {})
    [saga_id] = store.list_unfinished()
    before = loaded(store, saga_id)
    assert before.record.options["kind"] == "declarative"

    one = define_tool("one", lambda x: x, lambda out, inp: compensated.append("one"))
    assert recover(store, [one]) == []

    assert compensated == []  # resumed by its definition, never rolled back by recover()
    assert loaded(store, saga_id) == before


def test_recovery_ignores_a_saga_finished_since_it_was_listed(store: SagaStore) -> None:
    """Two recoverers: the second one's list is stale by the time it reaches the saga."""
    ledger = Ledger()
    saga = abandoned_saga(store, ledger, "a")
    stale_list = store.list_unfinished()
    only(recover(store, ledger.tools("a"), owner="first-host:1:first"))
    finished = loaded(store, saga.id)

    class StaleListStore:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def list_unfinished(self) -> list[str]:
            return stale_list

    results = recover(StaleListStore(), ledger.tools("a"), owner="second-host:2:second")

    assert results == []
    assert ledger.undone() == ["a"]
    assert loaded(store, saga.id) == finished


async def test_arecover_rolls_back_with_async_tools(store: SagaStore) -> None:
    ledger = Ledger()
    saga = abandoned_saga(store, ledger, "a", "b")
    undone: list[str] = []

    def async_tool(name: str) -> Tool:
        async def execute(input: Any) -> Any:
            return input

        async def undo(output: Any, input: Any) -> None:
            undone.append(name)

        return define_tool(name, execute, undo)

    result = only(await arecover(store, {"a": async_tool("a"), "b": async_tool("b")}))

    assert undone == ["b", "a"]
    assert result.status is SagaStatus.ROLLED_BACK
    assert loaded(store, saga.id).status is SagaStatus.ROLLED_BACK


# ---------------------------------------------------------------- a human takes over


def failed_rollback(store: SagaStore, ledger: Ledger) -> tuple[Saga, list[int]]:
    """A saga whose undo of step-1 failed, left ROLLBACK_FAILED by a process now dead."""
    undo_calls: list[int] = []

    def undo_fails_once(output: Any, input: Any) -> None:
        undo_calls.append(1)
        if len(undo_calls) == 1:
            raise ConnectionError("refund service unavailable")

    saga = Saga("needs-a-human", store=store, owner=dead_owner())
    saga.execute(define_tool("refund", lambda x: x, undo_fails_once), 1)
    with pytest.raises(SagaRollbackError):
        saga.execute(ledger.tool("boom", fail=True), 2)
    assert loaded(store, saga.id).status is SagaStatus.ROLLBACK_FAILED
    return saga, undo_calls


def test_another_process_can_restore_and_retry_a_failed_undo(store: SagaStore) -> None:
    ledger = Ledger()
    saga, undo_calls = failed_rollback(store, ledger)
    refund = define_tool("refund", lambda x: x, lambda out, inp: undo_calls.append(1))

    restored = Saga.restore(store, saga.id, {"refund": refund}, owner="dashboard:1:x")
    step = restored.retry_compensation("step-1", actor="alice")

    assert len(undo_calls) == 2
    assert step.state is StepState.ROLLED_BACK
    back = loaded(store, saga.id)
    assert back.status is SagaStatus.ROLLED_BACK
    assert [a.outcome for a in back.steps[0].compensation_attempts] == [
        AttemptOutcome.FAILED,
        AttemptOutcome.SUCCEEDED,
    ]
    assert back.steps[0].compensation_attempts[1].actor == "alice"


def test_another_process_can_attach_and_resolve_a_failed_undo(store: SagaStore) -> None:
    ledger = Ledger()
    saga, undo_calls = failed_rollback(store, ledger)

    attached = attach(Saga, store, saga.id, [], owner="dashboard:1:x")
    attached.resolve("step-1", "refunded by hand in the payment console", actor="bob")

    assert len(undo_calls) == 1
    back = loaded(store, saga.id)
    assert back.status is SagaStatus.ROLLED_BACK
    assert back.steps[0].state is StepState.RESOLVED
    assert back.steps[0].decision_note == "refunded by hand in the payment console"
    assert back.steps[0].decided_by == "bob"


def test_an_in_doubt_step_can_be_resolved_after_recovery(store: SagaStore) -> None:
    ledger = Ledger()
    saga = abandoned_saga(store, ledger, "a")
    with pytest.raises(Crash):
        saga.execute(crashing_tool("charge_card"), 2)
    only(recover(store, ledger.tools("a")))

    restored = Saga.restore(store, saga.id, {}, owner="dashboard:1:x")
    restored.resolve("step-2", "checked: the card was never charged", actor="carol")

    back = loaded(store, saga.id)
    assert back.status is SagaStatus.ROLLED_BACK
    assert back.steps[1].state is StepState.RESOLVED


def test_restore_refuses_a_saga_held_by_a_live_process(store: SagaStore) -> None:
    ledger = Ledger()
    saga = Saga("alive", store=store)
    saga.execute(ledger.tool("a"), 1)

    with pytest.raises(LeaseError):
        Saga.restore(store, saga.id, {"a": ledger.tool("a")}, owner="dashboard:1:x")
    assert loaded(store, saga.id).record.lease_owner == saga.snapshot().record.lease_owner


# ---------------------------------------------------------------- real processes, SIGKILL


def effects(marker_dir: Path) -> list[dict[str, Any]]:
    log = marker_dir / "effects.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def undo_counts(marker_dir: Path) -> dict[tuple[str, str], int]:
    """How often each (idempotency key, tool) was undone, over every process."""
    counts: dict[tuple[str, str], int] = {}
    for entry in effects(marker_dir):
        if entry["op"] == "undo":
            key = (entry["key"], entry["tool"])
            counts[key] = counts.get(key, 0) + 1
    return counts


class Workers:
    """Starts crash_worker.py processes; kills whatever is still running at the end."""

    def __init__(self, db_path: Path, marker_dir: Path) -> None:
        self.db_path = db_path
        self.marker_dir = marker_dir
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, mode: str) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(self.db_path), mode, str(self.marker_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.procs.append(proc)
        return proc

    def wait_ready(self, proc: subprocess.Popen[str]) -> str:
        """Wait (bounded) for the worker's signal; returns the saga id it wrote."""
        ready = self.marker_dir / f"ready-{proc.pid}"
        deadline = time.monotonic() + WAIT_SECONDS
        while not ready.exists():
            if proc.poll() is not None:
                _, err = proc.communicate()
                pytest.fail(f"worker exited with {proc.returncode} before its kill point:\n{err}")
            if time.monotonic() > deadline:
                pytest.fail(f"worker gave no signal within {WAIT_SECONDS}s")
            time.sleep(0.01)
        return ready.read_text()

    def kill(self, proc: subprocess.Popen[str]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=WAIT_SECONDS)  # reap it: a zombie still answers kill(pid, 0)
        assert proc.returncode == -signal.SIGKILL

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=WAIT_SECONDS)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    marker_dir = tmp_path / "markers"
    marker_dir.mkdir()
    spawned = Workers(tmp_path / "sagas.db", marker_dir)
    try:
        yield spawned
    finally:
        spawned.cleanup()


def kill_worker_at(workers: Workers, mode: str) -> str:
    """Run a worker to its kill point, SIGKILL it, and return its saga's id."""
    proc = workers.start(mode)
    saga_id = workers.wait_ready(proc)
    workers.kill(proc)
    return saga_id


def recover_in_this_process(workers: Workers) -> RecoveryResult:
    with SQLiteStore(workers.db_path) as store:
        return only(recover(store, worker.make_tools(workers.marker_dir)))


def stored(workers: Workers, saga_id: str) -> SagaSnapshot:
    with SQLiteStore(workers.db_path) as store:
        return loaded(store, saga_id)


@pytest.mark.slow
def test_killed_inside_a_step_leaves_it_in_doubt_and_undoes_the_rest(workers: Workers) -> None:
    saga_id = kill_worker_at(workers, "in_step")
    assert states(stored(workers, saga_id))["step-3"] is StepState.PENDING

    result = recover_in_this_process(workers)

    assert result.saga_id == saga_id
    assert result.status is SagaStatus.ROLLBACK_FAILED
    assert result.in_doubt == ("step-3",)
    assert undo_counts(workers.marker_dir) == {
        (f"{saga_id}:step-2", "t2"): 1,
        (f"{saga_id}:step-1", "t1"): 1,
    }
    undone_in_order = [e["tool"] for e in effects(workers.marker_dir) if e["op"] == "undo"]
    assert undone_in_order == ["t2", "t1"]
    assert states(stored(workers, saga_id)) == {
        "step-1": StepState.ROLLED_BACK,
        "step-2": StepState.ROLLED_BACK,
        "step-3": StepState.IN_DOUBT,
    }


@pytest.mark.slow
def test_killed_between_steps_undoes_both_completed_steps_once(workers: Workers) -> None:
    saga_id = kill_worker_at(workers, "between_steps")

    result = recover_in_this_process(workers)

    assert result.status is SagaStatus.ROLLED_BACK
    assert undo_counts(workers.marker_dir) == {
        (f"{saga_id}:step-2", "t2"): 1,
        (f"{saga_id}:step-1", "t1"): 1,
    }
    back = stored(workers, saga_id)
    assert back.status is SagaStatus.ROLLED_BACK
    assert [s.id for s in back.steps] == ["step-1", "step-2"]


@pytest.mark.slow
def test_killed_inside_an_undo_resumes_without_reundoing_finished_steps(
    workers: Workers,
) -> None:
    saga_id = kill_worker_at(workers, "in_undo")
    before = stored(workers, saga_id)
    assert before.status is SagaStatus.COMPENSATING
    assert states(before) == {
        "step-1": StepState.COMPENSATING,
        "step-2": StepState.ROLLED_BACK,
        "step-3": StepState.FAILED,
    }

    result = recover_in_this_process(workers)

    assert result.status is SagaStatus.ROLLED_BACK
    undos = [e for e in effects(workers.marker_dir) if e["op"] == "undo"]
    assert [e["tool"] for e in undos] == ["t2", "t1", "t1"]  # t2 once; t1 cut short, then rerun
    killed_t1, recovered_t1 = undos[1], undos[2]
    assert killed_t1["pid"] != recovered_t1["pid"] == os.getpid()
    assert recovered_t1["key"] == killed_t1["key"] == f"{saga_id}:step-1"
    assert (killed_t1["attempt"], recovered_t1["attempt"]) == (1, 2)
    step_1 = stored(workers, saga_id).steps[0]
    assert step_1.state is StepState.ROLLED_BACK
    assert [a.outcome for a in step_1.compensation_attempts] == [
        AttemptOutcome.INTERRUPTED,
        AttemptOutcome.SUCCEEDED,
    ]


@pytest.mark.slow
def test_two_recovering_processes_never_both_act_on_one_saga(workers: Workers) -> None:
    saga_count = 20
    owner = dead_owner()
    tools = worker.make_tools(workers.marker_dir)
    saga_ids = []
    with SQLiteStore(workers.db_path) as store:
        for n in range(saga_count):
            saga = Saga(f"orphan-{n}", store=store, owner=owner)
            saga.execute(tools[0], n)
            saga.execute(tools[1], n)
            saga_ids.append(saga.id)

    racers = [workers.start("recover") for _ in range(2)]
    for proc in racers:
        workers.wait_ready(proc)
    (workers.marker_dir / "go").touch()
    recovered_by = []
    for proc in racers:
        out, err = proc.communicate(timeout=WAIT_SECONDS * 3)
        assert proc.returncode == 0, err
        recovered_by.append(set(json.loads(out.strip().splitlines()[-1])))

    first, second = recovered_by
    assert first.isdisjoint(second)
    assert first | second == set(saga_ids)
    expected = {(f"{s}:step-{i}", f"t{i}"): 1 for s in saga_ids for i in (1, 2)}
    assert undo_counts(workers.marker_dir) == expected
    with SQLiteStore(workers.db_path) as store:
        assert store.list_unfinished() == []
        for saga_id in saga_ids:
            back = loaded(store, saga_id)
            assert back.status is SagaStatus.ROLLED_BACK
            assert back.record.lease_owner is None

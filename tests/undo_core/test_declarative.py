"""Agent Saga's declarative form: ``define_saga(name, steps, audit, store)``.

Most behaviours are pinned for three drivers: ``sync`` (plain steps, ``.run``),
``async`` (coroutine steps, ``await .arun``) and ``mixed`` (plain and
coroutine ``run``/``compensate`` functions in one definition, ``.arun``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from undo_core import (
    AuditRecord,
    LeaseError,
    SagaClosedError,
    SagaDefinitionError,
    SagaNotFoundError,
    SagaRollbackError,
    SagaStatus,
    SagaStep,
    Severity,
    SQLiteStore,
    StepState,
    define_saga,
    define_tool,
)
from undo_core import Saga as ImperativeSaga
from undo_core.testing import FakeClock

StepFn = Callable[[Any, Any], Any]


class Crash(BaseException):
    """Stands for the process dying mid-step: not an Exception, so nothing handles it."""


def _as_async(fn: StepFn) -> StepFn:
    async def wrapper(ctx: Any, state: Any) -> Any:
        await asyncio.sleep(0)
        return fn(ctx, state)

    return wrapper


@dataclass
class Driver:
    """Builds steps and runs definitions the way one mode (sync/async/mixed) does."""

    mode: str

    def _async_run(self, index: int) -> bool:
        return self.mode == "async" or (self.mode == "mixed" and index % 2 == 0)

    def _async_comp(self, index: int) -> bool:
        return self.mode == "async" or (self.mode == "mixed" and index % 2 == 1)

    def steps(self, *specs: tuple[str, StepFn, StepFn | None]) -> list[dict[str, Any]]:
        built = []
        for index, (name, run, comp) in enumerate(specs):
            step: dict[str, Any] = {
                "name": name,
                "run": _as_async(run) if self._async_run(index) else run,
            }
            if comp is not None:
                step["compensate"] = _as_async(comp) if self._async_comp(index) else comp
            built.append(step)
        return built

    def run(self, definition: Any, ctx: Any = None, state: Any = None, **kw: Any) -> Any:
        if self.mode == "sync":
            return definition.run(ctx, state, **kw)
        return asyncio.run(definition.arun(ctx, state, **kw))

    def resume(self, definition: Any, saga_id: str, ctx: Any = None) -> Any:
        if self.mode == "sync":
            return definition.resume(saga_id, ctx)
        return asyncio.run(definition.aresume(saga_id, ctx))


@pytest.fixture(params=["sync", "async", "mixed"])
def driver(request: pytest.FixtureRequest) -> Driver:
    return Driver(request.param)


@dataclass
class Journal:
    """Records every run/compensate call with the ctx and state objects it got."""

    calls: list[str] = field(default_factory=list)
    ctxs: list[Any] = field(default_factory=list)
    states: list[Any] = field(default_factory=list)
    seen: list[dict[str, Any]] = field(default_factory=list)

    def _note(self, label: str, ctx: Any, state: Any) -> None:
        self.calls.append(label)
        self.ctxs.append(ctx)
        self.states.append(state)
        self.seen.append(dict(state))

    def run(self, name: str, *, fail: BaseException | None = None) -> StepFn:
        def run(ctx: Any, state: Any) -> None:
            self._note(f"run:{name}", ctx, state)
            if fail is not None:
                raise fail
            state[name] = "done"

        return run

    def comp(self, name: str, *, fail: BaseException | None = None) -> StepFn:
        def compensate(ctx: Any, state: Any) -> None:
            self._note(f"comp:{name}", ctx, state)
            if fail is not None:
                raise fail
            state[f"undone_{name}"] = True

        return compensate

    @property
    def compensations(self) -> list[str]:
        return [c for c in self.calls if c.startswith("comp:")]


# ---------------------------------------------------------------- success


def test_steps_run_in_order_and_result_reads_completed_with_saga_id_and_state(
    driver: Driver,
) -> None:
    j = Journal()
    saga = define_saga(
        name="mail.send",
        steps=driver.steps(
            ("dkim-sign", j.run("dkim-sign"), j.comp("dkim-sign")),
            ("store-draft", j.run("store-draft"), j.comp("store-draft")),
            ("smtp-deliver", j.run("smtp-deliver"), None),
        ),
    )
    ctx = object()
    state: dict[str, Any] = {"message": "hi"}

    result = driver.run(saga, ctx, state, saga_id="send-1")

    assert result == {
        "status": "completed",
        "saga_id": "send-1",
        "state": {
            "message": "hi",
            "dkim-sign": "done",
            "store-draft": "done",
            "smtp-deliver": "done",
        },
    }
    assert result["state"] is state
    assert j.calls == ["run:dkim-sign", "run:store-draft", "run:smtp-deliver"]
    assert all(c is ctx for c in j.ctxs)
    assert all(s is state for s in j.states)


def test_each_step_sees_the_state_the_previous_steps_wrote(driver: Driver) -> None:
    def first(ctx: Any, state: Any) -> None:
        state["signed"] = f"signed({state['message']})"

    def second(ctx: Any, state: Any) -> None:
        state["draft"] = f"draft-of-{state['signed']}"

    saga = define_saga(name="chain", steps=driver.steps(("a", first, None), ("b", second, None)))

    result = driver.run(saga, None, {"message": "m"})

    assert result["state"]["draft"] == "draft-of-signed(m)"


def test_run_without_state_starts_from_an_empty_dict_and_generates_a_saga_id(
    driver: Driver,
) -> None:
    j = Journal()
    saga = define_saga(name="no-state", steps=driver.steps(("only", j.run("only"), None)))

    first = driver.run(saga)
    second = driver.run(saga)

    assert first["status"] == "completed"
    assert first["state"] == {"only": "done"}
    assert isinstance(first["saga_id"], str) and first["saga_id"]
    assert first["saga_id"] != second["saga_id"]


def test_steps_may_be_saga_step_dataclasses(driver: Driver) -> None:
    j = Journal()
    raw = driver.steps(("one", j.run("one"), j.comp("one")), ("two", j.run("two"), None))
    steps = [SagaStep(s["name"], s["run"], s.get("compensate")) for s in raw]

    result = driver.run(define_saga(name="dc", steps=steps), None, {})

    assert result["state"] == {"one": "done", "two": "done"}
    assert j.calls == ["run:one", "run:two"]


def test_a_definition_is_reusable_and_each_run_gets_its_own_state(driver: Driver) -> None:
    j = Journal()
    saga = define_saga(name="reuse", steps=driver.steps(("one", j.run("one"), None)))
    s1: dict[str, Any] = {"n": 1}
    s2: dict[str, Any] = {"n": 2}

    r1 = driver.run(saga, None, s1)
    r2 = driver.run(saga, None, s2)

    assert r1["state"] is s1 and r2["state"] is s2
    assert s1 == {"n": 1, "one": "done"} and s2 == {"n": 2, "one": "done"}


# ---------------------------------------------------------------- failure and compensation


def test_failure_compensates_completed_steps_newest_first_with_same_ctx_and_state(
    driver: Driver,
) -> None:
    j = Journal()
    boom = ValueError("smtp refused")
    saga = define_saga(
        name="mail.send",
        steps=driver.steps(
            ("dkim-sign", j.run("dkim-sign"), j.comp("dkim-sign")),
            ("store-draft", j.run("store-draft"), j.comp("store-draft")),
            ("outbox", j.run("outbox"), j.comp("outbox")),
            ("smtp-deliver", j.run("smtp-deliver", fail=boom), j.comp("smtp-deliver")),
        ),
    )
    ctx = {"smtp": "fake"}
    state: dict[str, Any] = {"message": "hi"}

    with pytest.raises(SagaRollbackError) as info:
        driver.run(saga, ctx, state)

    assert j.calls == [
        "run:dkim-sign",
        "run:store-draft",
        "run:outbox",
        "run:smtp-deliver",
        "comp:outbox",
        "comp:store-draft",
        "comp:dkim-sign",
    ]
    # the failed step itself is not compensated: its run did not complete
    assert "comp:smtp-deliver" not in j.calls
    assert all(c is ctx for c in j.ctxs)
    assert all(s is state for s in j.states)
    # each compensation sees what the runs (and newer compensations) wrote
    assert j.seen[4] == {
        "message": "hi",
        "dkim-sign": "done",
        "store-draft": "done",
        "outbox": "done",
    }
    assert j.seen[6]["undone_store-draft"] is True
    err = info.value
    assert str(err) == "saga 'mail.send' failed at step 'smtp-deliver': smtp refused"
    assert err.failed_step == "smtp-deliver"
    assert err.cause is boom
    assert err.__cause__ is boom
    assert err.compensation_cause is None
    assert err.failed_comp_step_name is None
    assert err.status == SagaStatus.ROLLED_BACK
    assert err.rolled_back == ("outbox", "store-draft", "dkim-sign")


def test_failure_of_the_first_step_compensates_nothing(driver: Driver) -> None:
    j = Journal()
    boom = RuntimeError("nope")
    saga = define_saga(
        name="first-fails",
        steps=driver.steps(
            ("one", j.run("one", fail=boom), j.comp("one")),
            ("two", j.run("two"), j.comp("two")),
        ),
    )

    with pytest.raises(SagaRollbackError) as info:
        driver.run(saga, None, {})

    assert j.calls == ["run:one"]
    assert str(info.value) == "saga 'first-fails' failed at step 'one': nope"
    assert info.value.rolled_back == ()


def test_step_without_compensate_is_skipped_during_compensation(driver: Driver) -> None:
    j = Journal()
    saga = define_saga(
        name="skip",
        steps=driver.steps(
            ("one", j.run("one"), j.comp("one")),
            ("pure", j.run("pure"), None),
            ("three", j.run("three"), j.comp("three")),
            ("four", j.run("four", fail=ValueError("x")), None),
        ),
    )

    with pytest.raises(SagaRollbackError) as info:
        driver.run(saga, None, {})

    assert j.compensations == ["comp:three", "comp:one"]
    err = info.value
    assert err.status == SagaStatus.ROLLED_BACK
    assert err.rolled_back == ("three", "one")
    assert err.skipped == ("pure",)
    assert err.compensation_cause is None
    assert str(err) == "saga 'skip' failed at step 'four': x"


def test_first_failed_compensation_halts_the_cascade_and_is_named_in_the_message(
    driver: Driver,
) -> None:
    j = Journal()
    boom = ValueError("disk full")
    comp_boom = OSError("draft store offline")
    saga = define_saga(
        name="mail.send",
        steps=driver.steps(
            ("one", j.run("one"), j.comp("one")),
            ("two", j.run("two"), j.comp("two", fail=comp_boom)),
            ("three", j.run("three"), j.comp("three")),
            ("four", j.run("four", fail=boom), j.comp("four")),
        ),
    )

    with pytest.raises(SagaRollbackError) as info:
        driver.run(saga, None, {})

    # three is compensated, two's compensation fails, and one is NOT compensated
    assert j.compensations == ["comp:three", "comp:two"]
    err = info.value
    assert str(err) == (
        "saga 'mail.send' failed at step 'four': disk full"
        " — and compensation of step 'two' subsequently failed: draft store offline"
    )
    assert err.failed_step == "four"
    assert err.cause is boom
    assert err.__cause__ is boom
    assert err.compensation_cause is comp_boom
    assert err.failed_comp_step_name == "two"
    assert err.status == SagaStatus.ROLLBACK_FAILED
    assert err.rolled_back == ("three",)
    assert err.failed == ("two",)
    assert "one" in err.unresolved and "two" in err.unresolved


def test_failing_compensation_of_the_newest_step_leaves_all_older_ones_alone(
    driver: Driver,
) -> None:
    j = Journal()
    saga = define_saga(
        name="halt-early",
        steps=driver.steps(
            ("one", j.run("one"), j.comp("one")),
            ("two", j.run("two"), j.comp("two")),
            ("three", j.run("three"), j.comp("three", fail=RuntimeError("c3"))),
            ("four", j.run("four", fail=RuntimeError("r4")), None),
        ),
    )

    with pytest.raises(SagaRollbackError) as info:
        driver.run(saga, None, {})

    assert j.compensations == ["comp:three"]
    assert info.value.failed_comp_step_name == "three"
    assert str(info.value).endswith("— and compensation of step 'three' subsequently failed: c3")


def test_error_without_message_still_names_step_and_saga(driver: Driver) -> None:
    saga = define_saga(
        name="quiet",
        steps=driver.steps(("one", Journal().run("one", fail=KeyError("k")), None)),
    )

    with pytest.raises(SagaRollbackError) as info:
        driver.run(saga, None, {})

    assert str(info.value) == "saga 'quiet' failed at step 'one': 'k'"


# ---------------------------------------------------------------- audit


def _failing_compensation_saga(driver: Driver, audit: Any) -> Any:
    j = Journal()
    return define_saga(
        name="audited",
        audit=audit,
        steps=driver.steps(
            ("one", j.run("one"), j.comp("one")),
            ("two", j.run("two"), j.comp("two", fail=RuntimeError("cannot undo"))),
            ("three", j.run("three", fail=RuntimeError("step broke")), None),
        ),
    )


def test_audit_sink_gets_compensation_failed_at_critical_severity(driver: Driver) -> None:
    records: list[AuditRecord] = []
    saga = _failing_compensation_saga(driver, records.append)

    with pytest.raises(SagaRollbackError):
        driver.run(saga, None, {}, saga_id="audit-1")

    failed = [r for r in records if r.action == "agent.saga.compensation_failed"]
    assert len(failed) == 1
    record = failed[0]
    assert record.severity is Severity.CRITICAL
    assert int(record.severity) == logging.CRITICAL
    assert record.step == "two"
    assert record.saga_id == "audit-1"
    assert record.saga_name == "audited"
    assert record.detail == "cannot undo"
    # the step failure is an ERROR, not CRITICAL
    step_failed = [r for r in records if r.action == "agent.saga.step_failed"]
    assert [(r.step, r.severity) for r in step_failed] == [("three", Severity.ERROR)]
    # halted: step one was never compensated, so no compensated record for it
    compensated = [r.step for r in records if r.action == "agent.saga.compensated"]
    assert compensated == []


def test_audit_sink_sees_the_lifecycle_of_a_successful_run(driver: Driver) -> None:
    records: list[AuditRecord] = []
    j = Journal()
    saga = define_saga(
        name="audited-ok",
        audit=records.append,
        steps=driver.steps(("one", j.run("one"), None), ("two", j.run("two"), None)),
    )

    driver.run(saga, None, {})

    actions = [(r.action, r.step) for r in records]
    assert actions[0] == ("agent.saga.started", None)
    assert ("agent.saga.step_completed", "one") in actions
    assert actions.index(("agent.saga.step_completed", "one")) < actions.index(
        ("agent.saga.step_completed", "two")
    )
    assert actions[-1] == ("agent.saga.completed", None)
    assert all(r.severity is Severity.INFO for r in records)


def test_audit_logger_logs_compensation_failed_at_logging_critical(
    driver: Driver, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger(f"tests.undo_core.declarative.audit.{driver.mode}")
    caplog.set_level(logging.DEBUG, logger=logger.name)
    saga = _failing_compensation_saga(driver, logger)

    with pytest.raises(SagaRollbackError):
        driver.run(saga, None, {})

    ours = [r for r in caplog.records if r.name == logger.name]
    failed = [r for r in ours if r.getMessage().startswith("agent.saga.compensation_failed")]
    assert len(failed) == 1
    assert failed[0].levelno == logging.CRITICAL
    assert failed[0].levelname == "CRITICAL"
    assert failed[0].audit.action == "agent.saga.compensation_failed"  # type: ignore[attr-defined]
    assert failed[0].audit.step == "two"  # type: ignore[attr-defined]
    step_failed = [r for r in ours if r.getMessage().startswith("agent.saga.step_failed")]
    assert [r.levelno for r in step_failed] == [logging.ERROR]


def test_audit_object_with_emit_method_is_used(driver: Driver) -> None:
    class Sink:
        def __init__(self) -> None:
            self.got: list[AuditRecord] = []

        def emit(self, record: AuditRecord) -> None:
            self.got.append(record)

    sink = Sink()
    saga = _failing_compensation_saga(driver, sink)

    with pytest.raises(SagaRollbackError):
        driver.run(saga, None, {})

    assert [r.severity for r in sink.got if r.action == "agent.saga.compensation_failed"] == [
        Severity.CRITICAL
    ]


def test_a_raising_audit_sink_does_not_break_the_saga(driver: Driver) -> None:
    def broken(record: AuditRecord) -> None:
        raise RuntimeError("audit backend down")

    j = Journal()
    saga = define_saga(name="loud", audit=broken, steps=driver.steps(("one", j.run("one"), None)))

    assert driver.run(saga, None, {})["status"] == "completed"


# ---------------------------------------------------------------- sync vs async


def test_run_refuses_a_definition_with_async_run_and_points_to_arun() -> None:
    j = Journal()
    saga = define_saga(
        name="has-async",
        steps=[
            {"name": "one", "run": j.run("one")},
            {"name": "two", "run": _as_async(j.run("two"))},
        ],
    )

    with pytest.raises(TypeError, match="arun"):
        saga.run(None, {})
    assert j.calls == []  # refused before any step ran


def test_run_refuses_a_definition_whose_only_async_part_is_a_compensate() -> None:
    j = Journal()
    saga = define_saga(
        name="async-comp",
        steps=[{"name": "one", "run": j.run("one"), "compensate": _as_async(j.comp("one"))}],
    )

    with pytest.raises(TypeError, match="arun"):
        saga.run(None, {})
    assert j.calls == []


def test_run_refuses_an_async_callable_object_step_and_points_to_arun() -> None:
    j = Journal()

    class AsyncRun:
        async def __call__(self, ctx: Any, state: Any) -> None:
            j.run("obj")(ctx, state)

    saga = define_saga(
        name="async-obj",
        steps=[{"name": "one", "run": j.run("one")}, {"name": "obj", "run": AsyncRun()}],
    )

    with pytest.raises(TypeError, match="arun"):
        saga.run(None, {})
    assert j.calls == []
    # and arun runs it
    assert asyncio.run(saga.arun(None, {}))["state"] == {"one": "done", "obj": "done"}


def test_resume_refuses_a_definition_with_async_steps_and_points_to_aresume(
    tmp_path: Path,
) -> None:
    saga = define_saga(
        name="has-async",
        store=SQLiteStore(tmp_path / "s.db"),
        steps=[{"name": "one", "run": _as_async(Journal().run("one"))}],
    )

    with pytest.raises(TypeError, match="aresume"):
        saga.resume("whatever")


def test_arun_runs_plain_steps_too() -> None:
    j = Journal()
    saga = define_saga(
        name="plain", steps=[{"name": "one", "run": j.run("one"), "compensate": j.comp("one")}]
    )

    assert asyncio.run(saga.arun(None, {}))["state"] == {"one": "done"}
    assert not saga.is_async


# ---------------------------------------------------------------- definitions


def _ok(ctx: Any, state: Any) -> None:
    return None


@pytest.mark.parametrize("steps", [[], None, ()])
def test_definition_without_steps_is_rejected(steps: Any) -> None:
    with pytest.raises(SagaDefinitionError, match="at least one step"):
        define_saga(name="empty", steps=steps)


def test_duplicate_step_names_are_rejected() -> None:
    with pytest.raises(SagaDefinitionError, match=r"duplicate step name 'a'"):
        define_saga(
            name="dup",
            steps=[{"name": "a", "run": _ok}, {"name": "b", "run": _ok}, {"name": "a", "run": _ok}],
        )


def test_non_callable_run_is_rejected() -> None:
    with pytest.raises(TypeError, match=r"step 'a': run must be callable"):
        define_saga(name="bad", steps=[{"name": "a", "run": "not a function"}])


def test_missing_run_is_rejected() -> None:
    with pytest.raises(TypeError, match=r"step 'a': run must be callable"):
        define_saga(name="bad", steps=[{"name": "a"}])


def test_non_callable_compensate_is_rejected() -> None:
    with pytest.raises(TypeError, match=r"step 'a': compensate must be callable"):
        define_saga(name="bad", steps=[{"name": "a", "run": _ok, "compensate": 42}])


def test_non_callable_compensate_in_a_dataclass_step_is_rejected() -> None:
    with pytest.raises(TypeError, match="compensate must be callable"):
        define_saga(name="bad", steps=[SagaStep("a", _ok, "nope")])  # type: ignore[arg-type]


def test_unknown_step_keys_are_rejected_with_their_names() -> None:
    with pytest.raises(SagaDefinitionError, match=r"unknown keys \['retry', 'undo'\]"):
        define_saga(name="bad", steps=[{"name": "a", "run": _ok, "undo": _ok, "retry": 3}])


@pytest.mark.parametrize("name", ["", "   ", None, 7])
def test_saga_without_a_proper_name_is_rejected(name: Any) -> None:
    with pytest.raises(SagaDefinitionError, match="non-empty name"):
        define_saga(name=name, steps=[{"name": "a", "run": _ok}])


@pytest.mark.parametrize("step_name", ["", "  ", None, 3])
def test_step_without_a_proper_name_is_rejected(step_name: Any) -> None:
    with pytest.raises(SagaDefinitionError, match=r"step #2 needs a non-empty name"):
        define_saga(name="ok", steps=[{"name": "a", "run": _ok}, {"name": step_name, "run": _ok}])


def test_step_that_is_neither_dict_nor_saga_step_is_rejected() -> None:
    with pytest.raises(SagaDefinitionError, match="must be a dict or SagaStep"):
        define_saga(name="ok", steps=[_ok])  # type: ignore[list-item]


def test_bad_compensation_failure_mode_is_rejected_when_run() -> None:
    saga = define_saga(
        name="ok", steps=[{"name": "a", "run": _ok}], on_compensation_failure="explode"
    )
    with pytest.raises(ValueError, match="on_compensation_failure"):
        saga.run(None, {})


# ---------------------------------------------------------------- store and resume


def _lease_expired(clock: FakeClock) -> FakeClock:
    """A clock for the 'restarted process': past the crashed process's lease."""
    return FakeClock(clock.current + timedelta(hours=1))


@dataclass
class CrashScenario:
    """A saga of three steps whose second step crashes the 'process' the first time."""

    driver: Driver
    db: Path
    journal: Journal = field(default_factory=Journal)
    crash_armed: bool = True
    third_fails: bool = False
    clock: FakeClock = field(default_factory=FakeClock)

    def _two(self, ctx: Any, state: Any) -> None:
        self.journal._note("run:two", ctx, state)
        if self.crash_armed:
            raise Crash()
        state["two"] = "done"

    def _three(self, ctx: Any, state: Any) -> None:
        self.journal._note("run:three", ctx, state)
        if self.third_fails:
            raise ValueError("quota exceeded")
        state["three"] = "done"

    def definition(self, clock: FakeClock, name: str = "export") -> Any:
        j = self.journal
        return define_saga(
            name=name,
            store=SQLiteStore(self.db),
            clock=clock,
            steps=self.driver.steps(
                ("one", j.run("one"), j.comp("one")),
                ("two", self._two, j.comp("two")),
                ("three", self._three, None),
            ),
        )

    def crash(self, saga_id: str = "export-1") -> str:
        with pytest.raises(Crash):
            self.driver.run(self.definition(self.clock), {"ctx": 1}, {"n": 0}, saga_id=saga_id)
        self.crash_armed = False
        return saga_id


def test_crash_leaves_saga_in_progress_with_state_checkpointed_after_step_one(
    driver: Driver, tmp_path: Path
) -> None:
    scenario = CrashScenario(driver, tmp_path / "sagas.db")

    saga_id = scenario.crash()

    snapshot = SQLiteStore(tmp_path / "sagas.db").load(saga_id)
    assert snapshot is not None
    assert snapshot.record.status is SagaStatus.IN_PROGRESS
    assert snapshot.record.state == {"n": 0, "one": "done"}
    assert [(s.id, s.state) for s in snapshot.steps] == [
        ("one", StepState.COMPLETED),
        ("two", StepState.PENDING),
    ]
    assert scenario.journal.calls == ["run:one", "run:two"]


def test_resume_continues_from_the_crashed_step_with_the_checkpointed_state(
    driver: Driver, tmp_path: Path
) -> None:
    scenario = CrashScenario(driver, tmp_path / "sagas.db")
    saga_id = scenario.crash()
    j = scenario.journal
    j.calls.clear()
    j.states.clear()
    j.ctxs.clear()
    j.seen.clear()
    fresh = scenario.definition(_lease_expired(scenario.clock))
    new_ctx = {"ctx": 2}

    result = driver.resume(fresh, saga_id, new_ctx)

    assert j.calls == ["run:two", "run:three"]  # step one is not run again
    assert j.seen[0] == {"n": 0, "one": "done"}  # step two starts from the checkpoint
    assert all(c is new_ctx for c in j.ctxs)
    assert j.states[0] is j.states[1]
    assert result == {
        "status": "completed",
        "saga_id": saga_id,
        "state": {"n": 0, "one": "done", "two": "done", "three": "done"},
    }
    assert result["state"] is j.states[0]
    snapshot = SQLiteStore(tmp_path / "sagas.db").load(saga_id)
    assert snapshot is not None
    assert snapshot.record.status is SagaStatus.COMPLETED
    assert snapshot.record.state == result["state"]
    assert [s.state for s in snapshot.steps] == [StepState.COMPLETED] * 3


def test_failure_after_resume_compensates_steps_done_before_the_crash(
    driver: Driver, tmp_path: Path
) -> None:
    scenario = CrashScenario(driver, tmp_path / "sagas.db", third_fails=True)
    saga_id = scenario.crash()
    j = scenario.journal
    j.calls.clear()
    j.states.clear()
    j.seen.clear()
    j.ctxs.clear()
    fresh = scenario.definition(_lease_expired(scenario.clock))
    new_ctx = {"ctx": 2}

    with pytest.raises(SagaRollbackError) as info:
        driver.resume(fresh, saga_id, new_ctx)

    assert j.calls == ["run:two", "run:three", "comp:two", "comp:one"]
    # compensation of the pre-crash step gets the restored state, the same object
    comp_one = j.calls.index("comp:one")
    assert j.states[comp_one] is j.states[0]
    assert j.ctxs[comp_one] is new_ctx
    assert j.seen[comp_one] == {"n": 0, "one": "done", "two": "done", "undone_two": True}
    err = info.value
    assert str(err) == "saga 'export' failed at step 'three': quota exceeded"
    assert err.status == SagaStatus.ROLLED_BACK
    assert err.rolled_back == ("two", "one")
    snapshot = SQLiteStore(tmp_path / "sagas.db").load(saga_id)
    assert snapshot is not None
    assert snapshot.record.status is SagaStatus.ROLLED_BACK
    assert [s.state for s in snapshot.steps] == [
        StepState.ROLLED_BACK,
        StepState.ROLLED_BACK,
        StepState.FAILED,
    ]


def test_resume_refuses_a_saga_that_completed(driver: Driver, tmp_path: Path) -> None:
    scenario = CrashScenario(driver, tmp_path / "sagas.db", crash_armed=False)
    definition = scenario.definition(scenario.clock)
    driver.run(definition, None, {"n": 0}, saga_id="done-1")
    scenario.journal.calls.clear()

    with pytest.raises(SagaClosedError, match="already ended as COMPLETED"):
        driver.resume(scenario.definition(_lease_expired(scenario.clock)), "done-1")
    assert scenario.journal.calls == []


def test_resume_refuses_a_saga_that_rolled_back(driver: Driver, tmp_path: Path) -> None:
    scenario = CrashScenario(driver, tmp_path / "sagas.db", crash_armed=False, third_fails=True)
    with pytest.raises(SagaRollbackError):
        driver.run(scenario.definition(scenario.clock), None, {"n": 0}, saga_id="rb-1")
    scenario.journal.calls.clear()

    with pytest.raises(SagaClosedError, match="ROLLED_BACK"):
        driver.resume(scenario.definition(_lease_expired(scenario.clock)), "rb-1")
    assert scenario.journal.calls == []


def test_resume_refuses_an_unknown_saga_id(driver: Driver, tmp_path: Path) -> None:
    scenario = CrashScenario(driver, tmp_path / "sagas.db")

    with pytest.raises(SagaNotFoundError, match="no-such-saga"):
        driver.resume(scenario.definition(scenario.clock), "no-such-saga")


def test_resume_refuses_a_saga_of_another_definition(driver: Driver, tmp_path: Path) -> None:
    scenario = CrashScenario(driver, tmp_path / "sagas.db")
    saga_id = scenario.crash()
    other = scenario.definition(_lease_expired(scenario.clock), name="import")

    with pytest.raises(SagaDefinitionError, match="belongs to 'export'"):
        driver.resume(other, saga_id)
    assert scenario.journal.calls == ["run:one", "run:two"]


def test_resume_refuses_an_imperative_saga(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sagas.db")
    imperative = ImperativeSaga("export", store=store, saga_id="imp-1")
    imperative.execute(define_tool("t", lambda x: x), 1)
    definition = define_saga(name="export", store=store, steps=[{"name": "a", "run": _ok}])

    with pytest.raises(SagaDefinitionError, match="belongs to None"):
        definition.resume("imp-1")


def test_resume_without_a_store_is_refused(driver: Driver) -> None:
    definition = define_saga(name="no-store", steps=driver.steps(("a", _ok, None)))

    with pytest.raises(SagaDefinitionError, match="no store"):
        driver.resume(definition, "any")


def test_resume_right_after_a_crash_in_the_same_process_needs_no_lease_expiry(
    tmp_path: Path,
) -> None:
    # Same clock, same live process: the crashed run let go of its lease when
    # the crash escaped, so resuming at once is allowed.
    scenario = CrashScenario(Driver("sync"), tmp_path / "sagas.db")
    saga_id = scenario.crash()
    scenario.journal.calls.clear()

    result = scenario.definition(scenario.clock).resume(saga_id)

    assert result["status"] == "completed"
    assert [c for c in scenario.journal.calls if c.startswith("run:")] == [
        "run:two",
        "run:three",
    ]


def test_resume_is_refused_while_another_live_run_holds_the_saga(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sagas.db")
    started: list[str] = []

    def step_one(ctx: Any, state: Any) -> None:
        # While the first run is still inside its step, a second resume must not take over.
        with pytest.raises(LeaseError):
            definition.resume(started[0])

    definition = define_saga(name="live", store=store, steps=[{"name": "one", "run": step_one}])
    started.append("live-1")
    assert definition.run({}, {}, saga_id="live-1")["status"] == "completed"


def test_store_checkpoints_the_state_after_each_step(driver: Driver, tmp_path: Path) -> None:
    db = tmp_path / "sagas.db"
    seen_in_store: list[Any] = []

    def peek(ctx: Any, state: Any) -> None:
        snapshot = SQLiteStore(db).load("cp-1")
        assert snapshot is not None
        seen_in_store.append(snapshot.record.state)

    def write(key: str) -> StepFn:
        def run(ctx: Any, state: Any) -> None:
            state[key] = True

        return run

    definition = define_saga(
        name="cp",
        store=SQLiteStore(db),
        steps=driver.steps(
            ("a", write("a"), None),
            ("peek1", peek, None),
            ("b", write("b"), None),
            ("peek2", peek, None),
        ),
    )

    driver.run(definition, None, {}, saga_id="cp-1")

    assert seen_in_store == [{"a": True}, {"a": True, "b": True}]

"""Property tests of the rollback rules, over random sequences of tools.

Each generated tool has an undo or not, an execute that succeeds or fails and
an undo that succeeds or fails; the saga runs them until one fails (or, when
all succeed, is rolled back by hand) under a random ``on_compensation_failure``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from undo_core import (
    AsyncSaga,
    Saga,
    SagaClosedError,
    SagaRollbackError,
    SagaStatus,
    StepState,
    Tool,
    define_tool,
)

SETTINGS = settings(max_examples=200, deadline=None)
ASYNC_SETTINGS = settings(max_examples=75, deadline=None)

UNSETTLED = {
    StepState.ROLLBACK_FAILED,
    StepState.IN_DOUBT,
    StepState.AWAITING_APPROVAL,
    StepState.COMPENSATING,
}


@dataclass(frozen=True)
class Spec:
    has_undo: bool
    execute_fails: bool
    undo_fails: bool


specs = st.builds(
    Spec,
    has_undo=st.booleans(),
    execute_fails=st.booleans() | st.just(False),  # bias towards longer runs
    undo_fails=st.booleans(),
)
spec_lists = st.lists(specs, min_size=1, max_size=8)
modes = st.sampled_from(["continue", "halt"])


@dataclass
class World:
    """Logs every execute and undo call by the tool's position."""

    log: list[tuple[str, int]] = field(default_factory=list)
    errors: dict[int, BaseException] = field(default_factory=dict)

    def tool(self, index: int, spec: Spec, *, asynchronous: bool = False) -> Tool:
        def execute(input: Any) -> int:
            self.log.append(("exec", index))
            if spec.execute_fails:
                err = RuntimeError(f"execute {index} failed")
                self.errors[index] = err
                raise err
            return index

        def undo(output: Any, input: Any) -> None:
            self.log.append(("undo", index))
            if spec.undo_fails:
                raise RuntimeError(f"undo {index} failed")

        if asynchronous:
            sync_execute, sync_undo = execute, undo

            async def aexecute(input: Any) -> int:
                await asyncio.sleep(0)
                return sync_execute(input)

            async def aundo(output: Any, input: Any) -> None:
                await asyncio.sleep(0)
                sync_undo(output, input)

            return define_tool(f"t{index}", aexecute, aundo if spec.has_undo else None)
        return define_tool(f"t{index}", execute, undo if spec.has_undo else None)

    @property
    def executed(self) -> list[int]:
        return [i for kind, i in self.log if kind == "exec"]

    @property
    def undone(self) -> list[int]:
        return [i for kind, i in self.log if kind == "undo"]


@dataclass
class Outcome:
    saga: Any
    world: World
    specs: list[Spec]
    failed_index: int | None
    error: SagaRollbackError | None
    rolled_back: bool


def _sid(index: int) -> str:
    return f"step-{index + 1}"


def run_sync(specs_: list[Spec], mode: str, rollback_when_all_succeed: bool) -> Outcome:
    world = World()
    saga = Saga("prop", on_compensation_failure=mode)  # type: ignore[arg-type]
    error = None
    failed_index = None
    for index, spec in enumerate(specs_):
        try:
            saga.execute(world.tool(index, spec), index)
        except SagaRollbackError as err:
            error, failed_index = err, index
            break
    rolled_back = error is not None
    if error is None and rollback_when_all_succeed:
        saga.rollback()
        rolled_back = True
    return Outcome(saga, world, specs_, failed_index, error, rolled_back)


async def run_async(specs_: list[Spec], mode: str, rollback_when_all_succeed: bool) -> Outcome:
    world = World()
    saga = AsyncSaga("prop", on_compensation_failure=mode)  # type: ignore[arg-type]
    error = None
    failed_index = None
    for index, spec in enumerate(specs_):
        try:
            await saga.execute(world.tool(index, spec, asynchronous=True), index)
        except SagaRollbackError as err:
            error, failed_index = err, index
            break
    rolled_back = error is not None
    if error is None and rollback_when_all_succeed:
        await saga.rollback()
        rolled_back = True
    return Outcome(saga, world, specs_, failed_index, error, rolled_back)


def _completed_with_undo(o: Outcome) -> list[int]:
    """Positions of steps whose execute succeeded and that have an undo."""
    return [i for i in o.world.executed if i != o.failed_index and o.specs[i].has_undo]


def check_rollback_properties(o: Outcome, mode: str) -> None:
    undone = o.world.undone
    states = {s.id: s.state for s in o.saga.steps}

    # executes run in order and stop at the first failure
    last = o.failed_index if o.failed_index is not None else len(o.specs) - 1
    assert o.world.executed == list(range(last + 1))

    # every undo belongs to a completed step with an undo, and runs at most once
    assert len(undone) == len(set(undone))
    assert set(undone) <= set(_completed_with_undo(o))

    # undos run in strictly reverse order of execution
    assert undone == sorted(undone, reverse=True)

    # the failed step's undo never runs
    assert o.failed_index is None or o.failed_index not in undone

    # nothing is undone unless a rollback ran
    if not o.rolled_back:
        assert undone == []
        assert o.saga.status is SagaStatus.IN_PROGRESS
        return

    # no undo ran after one that failed, under "halt"
    failed_undos = [i for i in undone if o.specs[i].undo_fails]
    expected_newest_first = sorted(_completed_with_undo(o), reverse=True)
    if mode == "continue":
        assert undone == expected_newest_first
    else:
        if failed_undos:
            assert undone[-1] == failed_undos[0]
            assert len(failed_undos) == 1
            cut = expected_newest_first.index(failed_undos[0]) + 1
            assert undone == expected_newest_first[:cut]
        else:
            assert undone == expected_newest_first

    # each step's state agrees with what happened to it
    for index in range(last + 1):
        state = states[_sid(index)]
        if index == o.failed_index:
            assert state is StepState.FAILED
        elif index in undone:
            expected = (
                StepState.ROLLBACK_FAILED if o.specs[index].undo_fails else StepState.ROLLED_BACK
            )
            assert state is expected
        else:
            assert state is StepState.COMPLETED

    # saga status agrees with the step states
    left_completed_with_undo = any(
        s.state is StepState.COMPLETED and s.has_undo for s in o.saga.steps
    )
    any_unsettled = any(s.state in UNSETTLED for s in o.saga.steps)
    if not any_unsettled and not left_completed_with_undo:
        assert o.saga.status is SagaStatus.ROLLED_BACK
    else:
        assert o.saga.status is SagaStatus.ROLLBACK_FAILED

    # the error's account agrees with the step states
    if o.error is not None:
        newest_first = list(reversed(o.saga.steps))
        err = o.error
        assert err.status == o.saga.status
        assert err.failed_step == _sid(o.failed_index)  # type: ignore[arg-type]
        assert err.cause is o.world.errors[o.failed_index]  # type: ignore[index]
        assert err.rolled_back == tuple(
            s.id for s in newest_first if s.state is StepState.ROLLED_BACK
        )
        assert err.failed == tuple(
            s.id for s in newest_first if s.state is StepState.ROLLBACK_FAILED
        )
        assert set(err.unresolved) == {
            s.id
            for s in o.saga.steps
            if s.state in UNSETTLED or (s.state is StepState.COMPLETED and s.has_undo)
        }
        assert err.skipped == tuple(
            s.id for s in newest_first if s.state is StepState.COMPLETED and not s.has_undo
        )
        if failed_undos:
            assert err.failed_comp_step == _sid(failed_undos[0])
            assert err.compensation_cause is not None
        else:
            assert err.compensation_cause is None
            assert err.failed_comp_step_name is None


@pytest.mark.slow  # property-based: many generated runs
@SETTINGS
@given(specs_=spec_lists, mode=modes, rollback_when_all_succeed=st.booleans())
def test_sync_saga_rollback_rules_hold_for_any_tool_sequence(
    specs_: list[Spec], mode: str, rollback_when_all_succeed: bool
) -> None:
    o = run_sync(specs_, mode, rollback_when_all_succeed)
    check_rollback_properties(o, mode)


@pytest.mark.slow  # property-based: many generated runs
@SETTINGS
@given(specs_=spec_lists, mode=modes, rollback_when_all_succeed=st.booleans())
def test_second_rollback_calls_no_undo_and_changes_nothing(
    specs_: list[Spec], mode: str, rollback_when_all_succeed: bool
) -> None:
    o = run_sync(specs_, mode, rollback_when_all_succeed)
    if not o.rolled_back:
        o.saga.rollback()
    log_before = list(o.world.log)
    status_before = o.saga.status
    states_before = [s.state for s in o.saga.steps]
    report_before = o.saga.report()

    report = o.saga.rollback()

    assert o.world.log == log_before
    assert o.saga.status is status_before
    assert [s.state for s in o.saga.steps] == states_before
    assert report == report_before


@pytest.mark.slow  # property-based: many generated runs
@SETTINGS
@given(specs_=spec_lists, mode=modes)
def test_an_ended_saga_refuses_new_steps_without_calling_the_tool(
    specs_: list[Spec], mode: str
) -> None:
    o = run_sync(specs_, mode, rollback_when_all_succeed=True)
    log_before = list(o.world.log)
    try:
        o.saga.execute(o.world.tool(99, Spec(True, False, False)), 99)
    except SagaClosedError:
        pass
    else:
        raise AssertionError("an ended saga accepted a new step")
    assert o.world.log == log_before


@pytest.mark.slow  # property-based: many generated runs
@ASYNC_SETTINGS
@given(specs_=spec_lists, mode=modes, rollback_when_all_succeed=st.booleans())
def test_async_saga_rollback_rules_hold_for_any_tool_sequence(
    specs_: list[Spec], mode: str, rollback_when_all_succeed: bool
) -> None:
    o = asyncio.run(run_async(specs_, mode, rollback_when_all_succeed))
    check_rollback_properties(o, mode)
    if o.rolled_back:
        log_before = list(o.world.log)
        asyncio.run(o.saga.rollback())
        assert o.world.log == log_before


# ---------------------------------------------------------------- manual flow

# An operation: ("add", spec) registers a step; ("complete", k) / ("fail", k)
# settle the k-th still-PENDING step (k taken modulo their number).
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), specs),
        st.tuples(st.sampled_from(["complete", "fail"]), st.integers(0, 7)),
    ),
    max_size=14,
)


@pytest.mark.slow  # property-based: many generated runs
@SETTINGS
@given(ops=operations, mode=modes)
def test_manual_flow_rollback_undoes_only_marked_completed_steps_newest_first(
    ops: list[tuple[str, Any]], mode: str
) -> None:
    world = World()
    saga = Saga("manual", on_compensation_failure=mode)  # type: ignore[arg-type]
    step_specs: dict[str, tuple[int, Spec]] = {}
    marked: dict[str, str] = {}
    for op, arg in ops:
        if op == "add":
            index = len(step_specs)
            sid = saga.add_step(world.tool(index, arg), index)
            step_specs[sid] = (index, arg)
            continue
        pending = [sid for sid in step_specs if sid not in marked]
        if not pending:
            continue
        sid = pending[arg % len(pending)]
        if op == "complete":
            saga.mark_completed(sid, step_specs[sid][0])
        else:
            saga.mark_failed(sid, f"step {sid} failed")
        marked[sid] = op

    # marking never runs a tool, and mark_failed does not roll back by itself
    assert world.log == []
    assert saga.status is SagaStatus.IN_PROGRESS

    saga.rollback()

    undone = world.undone
    completed_with_undo = [
        index
        for sid, (index, spec) in step_specs.items()
        if marked.get(sid) == "complete" and spec.has_undo
    ]
    assert len(undone) == len(set(undone))
    assert set(undone) <= set(completed_with_undo)
    assert undone == sorted(undone, reverse=True)
    expected = sorted(completed_with_undo, reverse=True)
    failing = [i for i in undone if step_specs[_sid(i)][1].undo_fails]
    if mode == "continue":
        assert undone == expected
    elif failing:
        assert len(failing) == 1 and undone[-1] == failing[0]
        assert undone == expected[: expected.index(failing[0]) + 1]
    else:
        assert undone == expected

    states = {s.id: s.state for s in saga.steps}
    for sid, (index, spec) in step_specs.items():
        how = marked.get(sid)
        if how is None or how == "fail":
            # never-marked steps are treated as not executed
            assert states[sid] is StepState.FAILED
        elif index in undone:
            assert states[sid] is (
                StepState.ROLLBACK_FAILED if spec.undo_fails else StepState.ROLLED_BACK
            )
        else:
            assert states[sid] is StepState.COMPLETED

    clean = not any(
        s.state in UNSETTLED or (s.state is StepState.COMPLETED and s.has_undo) for s in saga.steps
    )
    assert saga.status is (SagaStatus.ROLLED_BACK if clean else SagaStatus.ROLLBACK_FAILED)

    report = saga.report()
    newest_first = list(reversed(saga.steps))
    assert report.rolled_back == tuple(
        s.id for s in newest_first if s.state is StepState.ROLLED_BACK
    )
    assert report.failed == tuple(
        s.id for s in newest_first if s.state is StepState.ROLLBACK_FAILED
    )

    # after the rollback the saga is closed to the manual flow, and a second
    # rollback calls no undo
    log_before = list(world.log)
    try:
        saga.add_step(world.tool(99, Spec(True, False, False)))
    except SagaClosedError:
        pass
    else:
        raise AssertionError("add_step was accepted after rollback")
    saga.rollback()
    assert world.log == log_before

"""The engine's lean sync path keeps what the slower one guaranteed.

Issue 19 part 5 made a step cheaper (records built positionally, the rules' fast
path for the engine's own moves, one JSON encoder, record_json plans worked out
once). These tests pin that the shortcuts change nothing a store, a listener or
a reader can see: the snapshots stay immutable and equal to ones built field by
field, the rules still refuse what they refused, and the JSON is the same.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime, timedelta, timezone

import pytest

from undo_core import (
    ChangeRefused,
    MemoryStore,
    Saga,
    SagaChange,
    StepSnapshot,
    SystemClock,
    check_change,
    define_tool,
)
from undo_core.stores.record_json import record_json, time_text
from undo_core.stores.serialize import json_text


class Recording(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.changes: list[SagaChange] = []

    def apply(self, change: SagaChange) -> None:
        super().apply(change)
        self.changes.append(change)


ECHO = define_tool("echo", lambda x: {"got": x}, lambda out, x: None)


def _run(store: Recording) -> Saga:
    saga = Saga("lean", store=store)
    saga.execute(ECHO, 1)
    saga.execute(ECHO, 2)
    saga.rollback()
    return saga


def test_a_stored_snapshot_never_changes_when_the_step_moves_on() -> None:
    store = Recording()
    saga = Saga("lean", store=store)
    saga.execute(ECHO, 1)
    completed = store.changes[-1].step
    assert completed is not None
    kept = tuple(completed)

    saga.rollback()

    assert tuple(completed) == kept
    assert completed.state == "COMPLETED"
    with pytest.raises(AttributeError):
        completed.state = "ROLLED_BACK"  # type: ignore[misc]


def test_every_record_the_engine_builds_equals_one_built_by_keyword() -> None:
    store = Recording()
    _run(store)
    for change in store.changes:
        saga, step, event = change
        assert type(change) is SagaChange and change == SagaChange(saga, step, event)
        assert saga == type(saga)(**saga._asdict())
        assert event == type(event)(**event._asdict())
        if step is not None:
            assert type(step) is StepSnapshot and step == StepSnapshot(**step._asdict())


def test_the_engine_changes_still_replay_through_the_rules_field_by_field() -> None:
    store = Recording()
    _run(store)
    stored = None
    steps: dict[str, StepSnapshot] = {}
    for change in store.changes:
        # Equal copies (not the engine's own objects) take the rules' slow path: same verdict.
        copied = SagaChange(
            change.saga._replace(
                name=str(change.saga.name + " ")[:-1], options=dict(change.saga.options)
            ),
            change.step,
            change.event,
        )
        before = steps.get(change.step.id) if change.step is not None else None
        check_change(stored, before, copied, steps=list(steps.values()))
        stored = change.saga
        if change.step is not None:
            steps[change.step.id] = change.step


def test_a_changed_name_or_options_is_still_refused_naming_the_field() -> None:
    store = Recording()
    _run(store)
    first, second = store.changes[0], store.changes[1]
    renamed = second._replace(saga=second.saga._replace(name="other"))
    with pytest.raises(ChangeRefused) as refused:
        check_change(first.saga, None, renamed)
    assert refused.value.field == "saga.name"
    reopted = second._replace(saga=second.saga._replace(options={**second.saga.options, "x": 1}))
    with pytest.raises(ChangeRefused) as refused:
        check_change(first.saga, None, reopted)
    assert refused.value.field == "saga.options"


def test_record_json_is_the_same_whatever_form_skip_takes() -> None:
    store = Recording()
    _run(store)
    step = store.changes[-2].step
    assert step is not None
    as_tuple = record_json(step, skip=("id", "input"))
    assert record_json(step, skip=["id", "input"]) == as_tuple
    assert record_json(step, skip=iter(["id", "input"])) == as_tuple
    assert record_json(step, skip=frozenset({"input", "id"})) == as_tuple
    assert "id" not in as_tuple and "input" not in as_tuple
    assert list(record_json(step)) == [k if k != "compensation_attempts" else "attempts"
                                       for k in StepSnapshot._fields]  # fmt: skip


def test_utc_times_read_the_same_as_times_of_other_zones() -> None:
    now = SystemClock().now()
    assert now.tzinfo is UTC
    two_hours_east = now.astimezone(timezone(timedelta(hours=2)))
    assert time_text(now) == time_text(two_hours_east) == time_text(now.replace(tzinfo=None))
    assert time_text(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05+00:00"


def test_json_text_is_compact_unicode_and_refuses_nan() -> None:
    assert json_text({"a": [1, "é"]}) == '{"a":[1,"é"]}'
    assert json.loads(json_text({"b": 1.5})) == {"b": 1.5}
    with pytest.raises(ValueError):
        json_text(float("nan"))
    with pytest.raises(ValueError):
        json_text("\udc80")


def test_a_tool_names_its_calls_once() -> None:
    tool = define_tool("named", lambda x: x, lambda out, x: None)
    assert (tool.execute_what, tool.undo_what) == ("named.execute", "named.undo")
    assert "execute_what" not in repr(tool)


def test_each_saga_has_its_own_lease_owner_naming_this_host_and_process() -> None:
    first, second = Saga("one"), Saga("two")
    owners = {first.record.lease_owner, second.record.lease_owner}
    assert len(owners) == 2
    for owner in owners:
        assert owner is not None
        host, pid, nonce = owner.split(":")
        assert (host, int(pid)) == (socket.gethostname(), os.getpid()) and len(nonce) == 8

"""undo_core.stores.serialize: the one rule for what a store can keep, and the words it uses."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from undo_core import (
    MemoryStore,
    Saga,
    SagaChange,
    SagaRollbackError,
    SagaStatus,
    SerializationError,
    SQLiteStore,
    define_saga,
    define_tool,
)
from undo_core.stores.serialize import check_change, json_text, safe_text, value_problem

LONE = os.fsdecode(b"\xff")  # "\udcff"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"a": [1, {"b": LONE}]}, "x['a'][1]['b'] holds a lone surrogate '\\udcff' at index 0"),
        ({"ok": 1, LONE: 2}, "the key '\\udcff' in x holds a lone surrogate"),
        ({"n": float("inf")}, "x['n'] is inf, which is not JSON"),
        ([b"bytes"], "x[0] is of type bytes, which is not JSON"),
        ({1.5: "x", frozenset(): 1}, "the key frozenset() in x is of type frozenset"),
    ],
    ids=["nested-string", "key", "infinity", "bytes", "key-type"],
)
def test_a_problem_names_the_place_in_the_value(value: Any, problem: str) -> None:
    found = value_problem(value, "x")
    assert found is not None and found.startswith(problem)
    with pytest.raises((TypeError, ValueError)):
        json_text(value)  # the fast path refuses exactly what the walk explains


def test_a_circular_or_too_deep_value_is_named_not_a_recursion_error() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    assert value_problem(loop, "x") == "x['self'] contains itself (a circular reference)"
    deep: Any = 0
    for _ in range(100_000):
        deep = [deep]
    assert "nests deeper than" in (value_problem(deep, "x") or "")
    with pytest.raises(ValueError, match="nested deeper"):
        json_text(deep)


def test_storable_values_pass_unchanged_and_big_integers_inside_values_are_kept() -> None:
    value = {"name": "café ☕", "nul": "\x00", "big": 2**80, "t": (1, 2.5, None, True)}
    assert value_problem(value) is None
    assert json_text(value) == '{"name":"café ☕","nul":"\\u0000","big":' + str(2**80) + (
        ',"t":[1,2.5,null,true]}'
    )


def test_safe_text_escapes_only_lone_surrogates() -> None:
    assert safe_text("plain") == "plain"
    assert safe_text("café") == "café"
    assert safe_text(f"no such file: 'a{LONE}.txt'") == "no such file: 'a\\udcff.txt'"


def test_a_serialization_error_keeps_where_it_happened_through_pickling() -> None:
    err = SerializationError("input of step ...", saga_id="s-1", step_id="step-2", field="input")
    back = pickle.loads(pickle.dumps(err))
    assert (back.saga_id, back.step_id, back.field, str(back)) == (
        "s-1",
        "step-2",
        "input",
        "input of step ...",
    )
    assert isinstance(back, TypeError)


def test_sqlite_store_names_metadata_with_a_lone_surrogate(tmp_path: Path) -> None:
    calls: list[str] = []
    tool = define_tool("upload", lambda x: calls.append("upload"))
    with SQLiteStore(tmp_path / "s.sqlite3") as store:
        saga = Saga("uploads", store=store)
        with pytest.raises(SagaRollbackError) as caught:
            saga.execute(tool, {"ok": 1}, metadata={"call_id": LONE})
        err = caught.value.cause
        assert isinstance(err, SerializationError) and err.field == "metadata"
        assert "metadata['call_id'] holds a lone surrogate" in str(err)
        assert calls == []
        loaded = store.load(saga.id)
        assert loaded is not None and loaded.status is SagaStatus.ROLLED_BACK
        assert loaded.steps == ()


def test_sqlite_store_names_a_declarative_state_with_a_lone_surrogate(tmp_path: Path) -> None:
    def scan(ctx: Any, state: dict[str, Any]) -> None:
        state["names"] = [LONE]

    with SQLiteStore(tmp_path / "s.sqlite3") as store:
        definition = define_saga(name="scan", steps=[{"name": "scan", "run": scan}], store=store)
        with pytest.raises(SerializationError) as caught:
            definition.run({}, {})
        err = caught.value
        assert err.field == "state" and err.step_id is None
        assert str(err).startswith("state of saga 'scan'")
        assert "state['names'][0] holds a lone surrogate" in str(err)


def test_check_change_lets_a_custom_store_refuse_what_the_built_in_stores_refuse() -> None:
    class Strict(MemoryStore):
        """A custom store: MemoryStore, but refusing what could not be persisted elsewhere."""

        def apply(self, change: SagaChange) -> None:
            check_change(change)
            super().apply(change)

    store = Strict()
    tool = define_tool("rename", lambda x: {"to": x["to"]}, lambda out, x: None)
    good = Saga("renames", store=store)
    good.execute(tool, {"to": "a.txt"})
    bad = Saga("renames", store=store)
    with pytest.raises(SagaRollbackError) as caught:
        bad.execute(tool, {"to": LONE})
    err = caught.value.cause
    assert isinstance(err, SerializationError) and (err.step_id, err.field) == ("step-1", "input")
    loaded = store.load(good.id)
    assert loaded is not None and [s.tool_name for s in loaded.steps] == ["rename"]

"""The JSON tree, its budget and the structural diff (sagaboard.ui.payloads): no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from sagaboard.ui import payloads
from sagaboard.ui.payloads import ADDED, CHANGED, REMOVED, Change, Limits

SMALL = Limits(nodes=500, string=2000, depth=32)


def paths(node: payloads.Node) -> list[str]:
    return [node.path, *(p for child in node.children for p in paths(child))]


def find(node: payloads.Node, path: str) -> payloads.Node:
    if node.path == path:
        return node
    for child in node.children:
        if path.startswith(child.path):
            try:
                return find(child, path)
            except KeyError:
                continue
    raise KeyError(path)


def test_paths_use_the_search_syntax_for_keys_indexes_and_odd_keys() -> None:
    value = {"orderId": "o-17", "items": [{"sku": "A"}, {"sku": "B"}], "odd key": 1, "é": 2}
    root = payloads.tree(value, "input", SMALL).root
    assert paths(root) == [
        "input",
        "input.orderId",
        "input.items",
        "input.items[0]",
        "input.items[0].sku",
        "input.items[1]",
        "input.items[1].sku",
        'input["odd key"]',
        'input["\\xe9"]',
    ]
    assert find(root, "input.items[1].sku").copy == "B"
    assert find(root, "input.items[1]").index and find(root, "input.items[1]").key == "1"


def test_each_json_type_is_told_apart_and_copies_as_json() -> None:
    value = {"s": "1", "n": 1, "f": 1.5, "t": True, "no": False, "z": None, "o": {}, "a": []}
    root = payloads.tree(value, "output", SMALL).root
    kinds = {c.key: (c.kind, c.text, c.copy) for c in root.children}
    assert kinds == {
        "s": ("string", "1", "1"),  # the raw string: what a person pastes
        "n": ("number", "1", "1"),
        "f": ("number", "1.5", "1.5"),
        "t": ("boolean", "true", "true"),  # bool is not a number here
        "no": ("boolean", "false", "false"),
        "z": ("null", "null", "null"),
        "o": ("object", "0 keys", "{}"),
        "a": ("array", "0 items", "[]"),
    }
    assert root.copy == '{"s":"1","n":1,"f":1.5,"t":true,"no":false,"z":null,"o":{},"a":[]}'


def test_unicode_is_kept_and_a_scalar_root_is_one_node() -> None:
    root = payloads.tree("größe ‮ 🙂", "input", SMALL).root
    assert (root.kind, root.text, root.copy, root.children) == (
        "string",
        "größe ‮ 🙂",
        "größe ‮ 🙂",
        [],
    )
    assert payloads.tree(None, "output", SMALL).root.text == "null"


def test_past_the_node_budget_the_rest_is_counted_not_dropped() -> None:
    drawn = payloads.tree({"items": list(range(10)), "after": 1}, "input", Limits(nodes=5))
    assert drawn.truncated
    items = drawn.root.children[0]
    assert [c.path for c in items.children] == [f"input.items[{n}]" for n in range(4)]
    assert items.more == 6 and items.copy is None  # a part of it is no value to copy
    assert drawn.root.more == 1 and drawn.root.copy is None  # "after" did not fit either
    assert len(paths(drawn.root)) == 6  # the root and the five nodes of the budget


def test_a_huge_string_is_cut_at_the_limit_and_says_how_much_is_missing() -> None:
    huge = "x" * 1_000_000
    drawn = payloads.tree({"blob": huge, "small": "ok"}, "input", Limits(string=100))
    blob, small = drawn.root.children
    assert drawn.truncated and blob.text == "x" * 100 and blob.cut == 999_900
    assert blob.copy is None and drawn.root.copy is None  # no half value on the clipboard
    assert small.copy == "ok" and not small.cut


def test_a_large_complete_container_has_no_value_button_but_its_leaves_do() -> None:
    value = {"k": ["y" * 100] * 30}  # ~3,000 characters of JSON: past COPY_MAX
    drawn = payloads.tree(value, "input", SMALL)
    assert not drawn.truncated and drawn.root.copy is None
    assert drawn.root.children[0].children[0].copy == "y" * 100


def nested(depth: int) -> Any:
    value: Any = {"leaf": True}
    for _ in range(depth - 1):
        value = {"d": value}
    return value


def test_nesting_to_the_stored_depth_limit_is_drawn_whole() -> None:
    drawn = payloads.tree(nested(32), "input", SMALL)  # SAGABOARD_MAX_JSON_DEPTH's default
    assert not drawn.truncated
    deepest = paths(drawn.root)[-1]
    assert deepest == "input" + ".d" * 31 + ".leaf"


def test_deeper_than_the_depth_limit_is_counted_as_truncated() -> None:
    drawn = payloads.tree(nested(40), "input", Limits(depth=32))
    assert drawn.truncated
    node = drawn.root
    while node.children:
        node = node.children[0]
    assert node.path == "input" + ".d" * 32 and node.more == 1


def test_limits_come_from_the_settings(settings: Any) -> None:
    settings.SAGABOARD_PAYLOAD_MAX_NODES, settings.SAGABOARD_PAYLOAD_MAX_STRING = 7, 9
    settings.SAGABOARD_MAX_JSON_DEPTH = 4
    assert Limits.from_settings() == Limits(nodes=7, string=9, depth=4)


def test_diff_of_nested_objects_names_each_path() -> None:
    old = {"id": "o-17", "refund": {"amount": 10, "currency": "EUR"}, "gone": 1}
    new = {"id": "o-17", "refund": {"amount": 12, "currency": "EUR", "ref": "r-1"}}
    assert payloads.diff(old, new, SMALL).changes == [
        Change("refund.amount", CHANGED, "10", "12"),
        Change("refund.ref", ADDED, new='"r-1"'),
        Change("gone", REMOVED, old="1"),
    ]


def test_diff_of_arrays_is_index_by_index() -> None:
    changes = payloads.diff({"a": [1, 2, 3]}, {"a": [1, 5]}, SMALL).changes
    assert changes == [Change("a[1]", CHANGED, "2", "5"), Change("a[2]", REMOVED, old="3")]
    assert payloads.diff([], ["x"], SMALL).changes == [Change("[0]", ADDED, new='"x"')]


def test_a_type_change_says_both_types() -> None:
    assert payloads.diff({"n": 1}, {"n": "1"}, SMALL).changes == [
        Change("n", CHANGED, "1", '"1"', "number → string")
    ]
    assert payloads.diff({"b": True}, {"b": 1}, SMALL).changes[0].type_change == "boolean → number"
    whole = payloads.diff({"a": 1}, [1], SMALL).changes
    assert whole == [Change("(the whole value)", CHANGED, '{"a":1}', "[1]", "object → array")]


def test_equal_values_have_no_diff_and_numbers_compare_as_numbers() -> None:
    assert payloads.diff({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}, SMALL).same
    assert payloads.diff(1, 1.0, SMALL).same


def test_unicode_keys_and_values_in_a_diff() -> None:
    change = payloads.diff({"größe": "ä"}, {"größe": "ö"}, SMALL).changes[0]
    assert change == Change('["gr\\xf6\\xdfe"]', CHANGED, '"ä"', '"ö"')


def test_a_diff_past_its_budget_counts_the_rest() -> None:
    result = payloads.diff({}, {f"k{n}": n for n in range(10)}, Limits(nodes=3))
    assert len(result.changes) == 3 and result.more == 7 and not result.same


def test_huge_values_in_a_diff_are_cut() -> None:
    change = payloads.diff({"a": "x"}, {"a": "y" * 5000}, Limits(string=10)).changes[0]
    assert change.new == '"yyyyyyyyy… (4992 more characters)'


def test_a_diff_deeper_than_the_limit_shows_the_value_that_changed_there() -> None:
    change = payloads.diff(nested(5), nested(6), Limits(depth=2)).changes
    assert [c.path for c in change] == ["d.d"]


def attempt(number: int, outcome: str | None, error: str | None, seconds: float | None) -> Any:
    start = datetime(2026, 1, 31, 12, 0, number, tzinfo=UTC)
    finished = None if seconds is None else start + timedelta(seconds=seconds)
    return SimpleNamespace(
        number=number, started_at=start, finished_at=finished, outcome=outcome,
        error=error, actor=None,
    )  # fmt: skip


def test_consecutive_undo_attempts_are_diffed_on_what_they_have() -> None:
    attempts = [
        attempt(1, "failed", "FedEx 500", 1.5),
        attempt(2, "failed", "FedEx 503", 1.5),
        attempt(3, None, None, None),
    ]
    first, second = payloads.attempt_diffs(attempts, SMALL)
    assert (first.before, first.after) == (1, 2)
    assert first.diff.changes == [
        Change("error", CHANGED, '"FedEx 500"', '"FedEx 503"'),
        Change("started_at", CHANGED, '"2026-01-31T12:00:01Z"', '"2026-01-31T12:00:02Z"'),
        Change(
            "finished_at", CHANGED, '"2026-01-31T12:00:02.500000Z"', '"2026-01-31T12:00:03.500000Z"'
        ),
    ]
    kinds = {c.path: c.type_change for c in second.diff.changes}
    assert kinds["outcome"] == "string → null" and kinds["duration_seconds"] == "number → null"
    assert payloads.attempt_diffs(attempts[:1], SMALL) == []


def test_attempts_as_json_for_the_download() -> None:
    assert payloads.attempts_json([attempt(1, "succeeded", None, 0.25)]) == [
        {
            "number": 1, "outcome": "succeeded", "error": None, "actor": None,
            "started_at": "2026-01-31T12:00:01Z", "finished_at": "2026-01-31T12:00:01.250000Z",
            "duration_seconds": 0.25,
        }
    ]  # fmt: skip

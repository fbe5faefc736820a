"""Payloads people can read: a JSON value as a tree of nodes, and the difference of two.

Pure functions over stored JSON values (``Step.input``/``output``, undo attempts), so
the page (``sagaboard.ui.templatetags.sagaboard_payload``) only lays the answers out
and the tests pin them without a database. Paths use the syntax the search takes
(``input.items[2].sku``, ``input["odd key"]``: ``text_policy.join_path``), so a path
copied from a tree can be pasted into the search box.

A tree has a budget (``Limits``): so many nodes and so many characters per string.
What is past it is counted ("truncated: N more"), never silently dropped, and the page
links to the raw JSON for the rest.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from django.conf import settings

from sagaboard.infra.text_policy import join_path

OBJECT, ARRAY, STRING, NUMBER, BOOLEAN, NULL = (
    "object",
    "array",
    "string",
    "number",
    "boolean",
    "null",
)
ADDED, REMOVED, CHANGED = "added", "removed", "changed"
COPY_MAX = 2000
"""A container's value gets a copy button only while its compact JSON is this short."""


@dataclass(frozen=True)
class Limits:
    """How much of one value a page renders (``SAGABOARD_PAYLOAD_MAX_NODES``,
    ``SAGABOARD_PAYLOAD_MAX_STRING``, ``SAGABOARD_MAX_JSON_DEPTH``)."""

    nodes: int = 500
    string: int = 2000
    depth: int = 32

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(
            nodes=settings.SAGABOARD_PAYLOAD_MAX_NODES,
            string=settings.SAGABOARD_PAYLOAD_MAX_STRING,
            depth=settings.SAGABOARD_MAX_JSON_DEPTH,
        )


@dataclass
class Node:
    """One value of the tree. ``key`` is the object key or array index that holds it (None
    at the root); ``text`` the value as JSON shows it (a container's: ``{3 keys}``);
    ``copy`` what its copy button copies (None: too large, use the download)."""

    path: str
    kind: str
    text: str
    key: str | None = None
    index: bool = False
    copy: str | None = None
    children: list[Node] = field(default_factory=list)
    more: int = 0
    """Children past the budget, not rendered."""
    cut: int = 0
    """Characters of a string past the budget, not rendered."""


@dataclass
class Tree:
    root: Node
    truncated: bool
    """Something is missing from the tree: the page offers the raw JSON."""


def kind_of(value: Any) -> str:
    """The JSON type of a Python value read from JSON (bool before int: True is an int)."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int | float):
        return NUMBER
    if isinstance(value, str):
        return STRING
    if isinstance(value, dict):
        return OBJECT
    if isinstance(value, list | tuple):
        return ARRAY
    return STRING  # never stored; shown by its str rather than failing the page


def compact(value: Any) -> str:
    """One-line JSON, non-ASCII kept (what a copy button copies, what a diff shows).

    Scalars spelled as ``json.dumps`` spells them (so as stored); containers by orjson,
    ten times faster, or by ``json`` for what orjson refuses (integers past 64 bits)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return json.dumps(value)
    if isinstance(value, dict | list):
        try:
            return orjson.dumps(value).decode()
        except (orjson.JSONEncodeError, TypeError):
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


class _Budget:
    def __init__(self, limits: Limits) -> None:
        self.limits, self.left, self.truncated = limits, limits.nodes, False

    def take(self) -> bool:
        if self.left <= 0:
            self.truncated = True
            return False
        self.left -= 1
        return True


def _items(value: Any) -> Iterator[tuple[str, bool, Any]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield str(key), False, child
    else:
        for n, child in enumerate(value):
            yield str(n), True, child


def _child_path(path: str, key: str, index: bool) -> str:
    return f"{path}[{key}]" if index else join_path(path, key)


def _scalar(node: Node, value: Any, budget: _Budget) -> None:
    if node.kind == STRING:
        text = value if isinstance(value, str) else str(value)
        limit = budget.limits.string
        if len(text) > limit:
            node.text, node.cut, budget.truncated = text[:limit], len(text) - limit, True
        else:
            node.text, node.copy = text, text
    else:
        node.text = node.copy = compact(value)


def _build(value: Any, depth: int, budget: _Budget, node: Node) -> bool:
    """Fill ``node`` from ``value``; whether all of it fit in the budget."""
    if node.kind not in (OBJECT, ARRAY):
        _scalar(node, value, budget)
        return not node.cut
    size = len(value)
    node.text = (
        _count(size, "key", "keys") if node.kind == OBJECT else _count(size, "item", "items")
    )
    if depth >= budget.limits.depth and size:
        node.more, budget.truncated = size, True
        return False
    complete = True
    for n, (key, index, child) in enumerate(_items(value)):
        if not budget.take():
            node.more = size - n
            return False
        sub = Node(path=_child_path(node.path, key, index), kind=kind_of(child), text="", key=key)
        sub.index = index
        complete = _build(child, depth + 1, budget, sub) and complete
        node.children.append(sub)
    if complete:
        text = compact(value)
        node.copy = text if len(text) <= COPY_MAX else None
    return complete


def tree(value: Any, root: str, limits: Limits | None = None) -> Tree:
    """``value`` as a tree whose paths start at ``root`` (``input``, ``output``)."""
    budget = _Budget(limits or Limits.from_settings())
    node = Node(path=root, kind=kind_of(value), text="")
    _build(value, 0, budget, node)
    return Tree(root=node, truncated=budget.truncated)


@dataclass(frozen=True)
class Change:
    """One difference: at ``path``, ``old`` became ``new`` (compact JSON; None where the
    key was not there). ``type_change`` names both types when they differ."""

    path: str
    kind: str
    old: str | None = None
    new: str | None = None
    type_change: str = ""

    @property
    def symbol(self) -> str:
        return {ADDED: "+", REMOVED: "\u2212", CHANGED: "~"}[self.kind]  # minus sign


@dataclass
class Diff:
    changes: list[Change]
    more: int = 0
    """Changes past the budget, not listed."""

    @property
    def same(self) -> bool:
        return not self.changes and not self.more


def _shown(value: Any, limits: Limits) -> str:
    text = compact(value)
    if len(text) > limits.string:
        return f"{text[: limits.string]}… ({len(text) - limits.string} more characters)"
    return text


def _walk(old: Any, new: Any, path: str, depth: int, limits: Limits) -> Iterator[Change]:
    old_kind, new_kind = kind_of(old), kind_of(new)
    shown = path or "(the whole value)"
    if old_kind != new_kind:
        yield Change(
            shown, CHANGED, _shown(old, limits), _shown(new, limits), f"{old_kind} → {new_kind}"
        )
        return
    if old_kind == OBJECT and depth < limits.depth:
        for key, value in old.items():
            sub = join_path(path, str(key))
            if key not in new:
                yield Change(sub, REMOVED, old=_shown(value, limits))
            else:
                yield from _walk(value, new[key], sub, depth + 1, limits)
        for key, value in new.items():
            if key not in old:
                yield Change(join_path(path, str(key)), ADDED, new=_shown(value, limits))
        return
    if old_kind == ARRAY and depth < limits.depth:
        for n in range(max(len(old), len(new))):
            sub = f"{path}[{n}]"
            if n >= len(new):
                yield Change(sub, REMOVED, old=_shown(old[n], limits))
            elif n >= len(old):
                yield Change(sub, ADDED, new=_shown(new[n], limits))
            else:
                yield from _walk(old[n], new[n], sub, depth + 1, limits)
        return
    if old != new:
        yield Change(shown, CHANGED, _shown(old, limits), _shown(new, limits))


def diff(old: Any, new: Any, limits: Limits | None = None) -> Diff:
    """What changed from ``old`` to ``new``, path by path (``items[2].sku``; an array is
    compared index by index). At most ``limits.nodes`` changes are listed."""
    limits = limits or Limits.from_settings()
    changes: list[Change] = []
    more = 0
    for change in _walk(old, new, "", 0, limits):
        if len(changes) < limits.nodes:
            changes.append(change)
        else:
            more += 1
    return Diff(changes, more)


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat().replace("+00:00", "Z")


def attempt_facts(attempt: Any) -> dict[str, Any]:
    """What an undo attempt has to compare (it holds no payload): outcome, error, who,
    when, and how long it took (seconds, None while it runs)."""
    duration = None
    if attempt.finished_at is not None:
        duration = round((attempt.finished_at - attempt.started_at).total_seconds(), 3)
    return {
        "outcome": attempt.outcome,
        "error": attempt.error,
        "actor": attempt.actor,
        "started_at": _iso(attempt.started_at),
        "finished_at": _iso(attempt.finished_at),
        "duration_seconds": duration,
    }


@dataclass
class AttemptDiff:
    before: int
    after: int
    diff: Diff


def attempt_diffs(attempts: Sequence[Any], limits: Limits | None = None) -> list[AttemptDiff]:
    """Each undo attempt against the one before it (#1 → #2, #2 → #3, ...)."""
    facts = [attempt_facts(a) for a in attempts]
    return [
        AttemptDiff(
            attempts[n - 1].number, attempts[n].number, diff(facts[n - 1], facts[n], limits)
        )
        for n in range(1, len(attempts))
    ]


def attempts_json(attempts: Sequence[Any]) -> list[dict[str, Any]]:
    """A step's undo attempts as JSON (the raw download of ``attempts.json``)."""
    return [{"number": a.number, **attempt_facts(a)} for a in attempts]

"""Policy conditions: a small, safe expression language over a step's input and output.

Admins write ``input.amount > 100``, ``output.refund.currency == "EUR" and
input.amount >= 50``, ``"vip" in input.tags`` or ``not input.dry_run``. Python's
parser reads the text, and only this whitelist is evaluated: names ``input``
and ``output``, attribute or ``["key"]`` access into them, literals, comparisons,
``and``/``or``/``not``, ``in``. No calls, no dunders: an admin's text cannot run
code. A path that does not exist is ``None``, and comparing ``None`` with a
number is false, so a condition never raises on an odd step.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

MAX_LENGTH = 300

_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: b is not None and a in b,
    ast.NotIn: lambda a, b: b is None or a not in b,
}


class ConditionError(ValueError):
    """The condition is not one this language accepts; the message says where."""


def parse(text: str) -> ast.Expression:
    """Parse and check ``text``; ``ConditionError`` says what is not allowed."""
    if len(text) > MAX_LENGTH:
        raise ConditionError(f"at most {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ConditionError(f"not a valid expression: {err.msg}") from None
    for node in ast.walk(tree):
        _check(node)
    return tree


def _check(node: ast.AST) -> None:
    allowed = (
        ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub,
        ast.Compare, ast.Constant, ast.Attribute, ast.Subscript, ast.Name, ast.Load,
        ast.List, ast.Tuple, *_COMPARE,
    )  # fmt: skip
    if not isinstance(node, allowed):
        raise ConditionError(f"{type(node).__name__.lower()} is not allowed in a condition")
    if isinstance(node, ast.Name) and node.id not in ("input", "output"):
        raise ConditionError(f"unknown name {node.id!r}: use input.<field> or output.<field>")
    if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
        raise ConditionError(f"field {node.attr!r} is not allowed")
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and not isinstance(node.operand, ast.Constant)
    ):
        raise ConditionError("minus applies to numbers only")


def matches(text: str, *, input: Any, output: Any) -> bool:
    """Whether the step with this input and output meets the condition (empty: always)."""
    if not text.strip():
        return True
    return bool(_eval(parse(text).body, {"input": input, "output": output}))


def _eval(node: ast.AST, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.Attribute):
        return _field(_eval(node.value, names), node.attr)
    if isinstance(node, ast.Subscript):
        return _field(_eval(node.value, names), _eval(node.slice, names))
    if isinstance(node, ast.List | ast.Tuple):
        return [_eval(e, names) for e in node.elts]
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, names)
        return (not value) if isinstance(node.op, ast.Not) else -value
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, names) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, names)
            try:
                if not _COMPARE[type(op)](left, right):
                    return False
            except TypeError:  # None > 100, "a" < 1: not a match, not an error
                return False
            left = right
        return True
    raise ConditionError(f"{type(node).__name__} is not allowed")  # parse() keeps this out


def _field(value: Any, key: Any) -> Any:
    if isinstance(value, dict):
        return value.get(key)
    if isinstance(value, list) and isinstance(key, int) and -len(value) <= key < len(value):
        return value[key]
    return None

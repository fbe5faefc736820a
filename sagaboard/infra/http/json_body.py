"""Request bodies as JSON, fast and exactly.

orjson parses an event batch in half the time ``json`` takes and refuses ``NaN`` and
``Infinity`` (not JSON; ``json.loads`` lets them through). But it turns integers past
64 bits into floats, and agents' inputs and outputs must round-trip exactly: a body
holding a run of 19 digits or more goes through ``json``, refusing those constants too.

What ``json`` takes and orjson does not, besides those long integers, cannot be stored:
lone surrogates (``"\\udc80"``: not UTF-8) and numbers past a double's range (``1e999``
reads as infinity). A body read by ``json`` is searched for them (``BadValue``, naming
where), so a refusal names the field instead of the database failing on it.

Integers round-trip exactly up to ``sys.get_int_max_str_digits()`` digits (4300 unless the
interpreter is set otherwise): Python refuses to convert a longer one (converting is
quadratic in its length), in and out. A longer integer is not malformed JSON: it is a
``BadValue`` naming where it is ("integer too large (more than 4300 digits)"), found
without converting it; the limit is the interpreter's, never raised for a request.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import orjson

from sagaboard.infra.text_policy import join_path, json_problem

_ZEROS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
"""Each digit as ``0``, every other byte a space: a run of digits stays a run of zeros."""


def _has_long_number(body: bytes) -> bool:
    """Whether ``body`` holds a run of 19 digits or more.

    ``re.search(rb"\\d{19,}")`` costs 2 ms on a 100-event batch (it retries at every
    digit); mapping digits to ``0`` and everything else to a space (``bytes.translate``)
    and looking for nineteen zeros is C loops only, a twentieth of that.
    """
    return b"0" * 19 in body.translate(_ZEROS)


def max_int_digits() -> int:
    """The most digits an integer may have to round-trip (``0``: no limit)."""
    return sys.get_int_max_str_digits()


def int_too_large(limit: int) -> str:
    return f"is an integer too large (more than {limit} digits)"


class _TooLong:
    """What an integer literal past the limit parses to: a marker, found (and named) after."""

    __slots__ = ()


_TOO_LONG = _TooLong()


class NotJson(ValueError):
    """The body parses only as Python's JSON superset (NaN, Infinity), or nests too deep."""


class BadValue(ValueError):
    """A value in the body that cannot be stored; ``path`` is where, from the body's root
    (``events[0].step.input.a``), ``""`` for the body itself."""

    def __init__(self, reason: str, path: str) -> None:
        super().__init__(f"{path}: {reason}" if path else f"the body {reason}")
        self.reason, self.path = reason, path


def _not_json(constant: str) -> Any:
    raise NotJson(f"{constant} is not a JSON value")


def parse_json(body: bytes) -> Any:
    """The JSON value of ``body``; ``ValueError`` when it is not JSON."""
    if _has_long_number(body):
        return _standard(body)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        # orjson says little about why, and refuses some JSON ``json`` takes (lone
        # surrogate escapes): on this error path only, the standard parser decides, naming
        # NaN/Infinity (NotJson) or nesting (RecursionError) when that is the reason.
        return _standard(body)


def _standard(body: bytes) -> Any:
    """``body`` read by ``json``, then searched for what cannot be stored (``BadValue``)."""
    limit = max_int_digits()
    if not limit or b"0" * (limit + 1) not in body.translate(_ZEROS):
        return _checked(json.loads(body, parse_constant=_not_json))
    # A run of digits past the limit: if it is an integer (not text, not a float's digits),
    # it parses to a marker instead of failing the whole body as "not JSON".
    found: list[str] = []

    def parse_int(literal: str) -> Any:
        if len(literal) - (literal[0] == "-") > limit:
            found.append(literal)
            return _TOO_LONG
        return int(literal)

    value = json.loads(body, parse_constant=_not_json, parse_int=parse_int)
    if found:
        raise BadValue(int_too_large(limit), _path_of_too_long(value))
    return _checked(value)


def _path_of_too_long(value: Any) -> str:
    """Where (``events[0].step.input.n``) the first integer past the limit is."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if item is _TOO_LONG:
            return path
        if type(item) is dict:
            for key, child in reversed(item.items()):
                stack.append((child, join_path(path, key)))
        elif type(item) is list:
            for n in range(len(item) - 1, -1, -1):
                stack.append((item[n], f"{path}[{n}]"))
    return ""  # a later duplicate key replaced it: the body, then


def _checked(value: Any) -> Any:
    problem = json_problem(value)
    if problem is not None:
        raise BadValue(problem.reason, problem.path)
    return value

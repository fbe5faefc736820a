"""Request bodies as JSON, fast and exactly.

orjson parses an event batch in half the time ``json`` takes and refuses ``NaN`` and
``Infinity`` (not JSON; ``json.loads`` lets them through). But it turns integers past
64 bits into floats, and agents' inputs and outputs must round-trip exactly: a body
holding a run of 19 digits or more goes through ``json``, refusing those constants too.

What ``json`` takes and orjson does not, besides those long integers, cannot be stored:
lone surrogates (``"\\udc80"``: not UTF-8) and numbers past a double's range (``1e999``
reads as infinity). A body read by ``json`` is searched for them (``BadValue``, naming
where), so a refusal names the field instead of the database failing on it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from sagaboard.infra.text_policy import json_problem

_LONG_NUMBER = re.compile(rb"\d{19,}")


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
    if _LONG_NUMBER.search(body):
        return _checked(json.loads(body, parse_constant=_not_json))
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        # orjson says little about why, and refuses some JSON ``json`` takes (lone
        # surrogate escapes): on this error path only, the standard parser decides, naming
        # NaN/Infinity (NotJson) or nesting (RecursionError) when that is the reason.
        return _checked(json.loads(body, parse_constant=_not_json))


def _checked(value: Any) -> Any:
    problem = json_problem(value)
    if problem is not None:
        raise BadValue(problem.reason, problem.path)
    return value

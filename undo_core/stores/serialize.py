"""What a store can keep: the one rule for the values of a transition, and its one encoder.

Every store that writes a transition somewhere other than this process's memory
(``SQLiteStore``'s file, ``SagaboardStore``'s queue, spool and request bodies)
needs the same three things of its values, so they are decided here once:

* **JSON**: dicts (string keys), lists, tuples, strings, finite numbers, booleans,
  ``None``. ``NaN`` and ``Infinity`` are not JSON, and sagaboard refuses them.
* **Unicode text**: every string, dict keys included, must encode as UTF-8. A *lone
  surrogate* (``"\\udc80"``) cannot: ``os.fsdecode()`` returns one for each byte of a
  file name that is not UTF-8, so it is the usual way such a value appears. SQLite
  and HTTP would fail on it later, far from the step that carried it.
* **64-bit counters**: the engine's own integers (``seq``, ``position``,
  ``next_step_number``, attempt numbers) fit in -2**63..2**63-1, what SQLite and
  sagaboard's columns hold. Integers *inside* inputs and outputs are not bounded:
  they are kept as JSON text and round-trip exactly.

:func:`json_text` is the fast path (one ``json.dumps`` in C, plus a UTF-8 check
only for non-ASCII text). When it fails, :func:`unstorable` walks the change to
name the saga, the step, the field and the place in it, so the engine fails that
step with a :class:`~undo_core.SerializationError` a person can act on.
:class:`~undo_core.MemoryStore` keeps objects as given and checks nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..vocabulary.errors import SerializationError
from ..vocabulary.records import SagaRecord, StepSnapshot
from .storage import SagaChange

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "change_problem",
    "check_change",
    "check_counters",
    "json_text",
    "safe_text",
    "unstorable",
    "value_problem",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_MAX_DEPTH = 200  # deeper than any store or sagaboard takes (its default limit is 32)

# One encoder for every call: ``json.dumps`` with options builds a new one each time.
_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def json_text(value: Any) -> str:
    """``value`` as compact JSON text every store can keep; ``ValueError``/``TypeError`` if not.

    ``ensure_ascii=False`` keeps text readable (and short) in SQLite and on the
    wire, so a lone surrogate would pass ``json.dumps``: the UTF-8 check catches
    it (``UnicodeEncodeError`` is a ``ValueError``), and costs nothing for ASCII.
    """
    try:
        text = _encode(value)
    except RecursionError as err:
        raise ValueError(f"nested deeper than Python can encode: {err}") from err
    if not text.isascii():
        text.encode("utf-8")
    return text


def check_counters(change: SagaChange) -> None:
    """``OverflowError`` if one of the engine's integers is outside 64 bits (the fast path)."""
    r, s, e = change
    fits = INT64_MIN <= r.seq <= INT64_MAX and INT64_MIN <= r.next_step_number <= INT64_MAX
    if fits and s is not None:
        fits = INT64_MIN <= s.position <= INT64_MAX and all(
            INT64_MIN <= a.number <= INT64_MAX for a in s.compensation_attempts
        )
    if not (fits and INT64_MIN <= e.seq <= INT64_MAX):
        raise OverflowError("a counter of the transition is outside 64 bits")


def safe_text(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (``\\udc80``), so it can be stored.

    For what the engine itself writes about a failure (an error message, a
    traceback): an exception about a file whose name is not UTF-8 must still be
    recorded, and the escape says exactly which bytes were there.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def value_problem(value: Any, path: str = "the value") -> str | None:
    """Why ``value`` cannot be stored, naming where in it (``path`` is its name); else ``None``."""
    return _problem(value, path, 0, set())


def _problem(value: Any, path: str, depth: int, seen: set[int]) -> str | None:
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, str):
        return _text_problem(value, path)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return f"{path} is {value!r}, which is not JSON (NaN and Infinity are refused)"
        return None
    if not isinstance(value, dict | list | tuple):  # what json.dumps takes
        return (
            f"{path} is of type {type(value).__name__}, which is not JSON "
            "(use dict, list, str, int, float, bool or None)"
        )
    if depth >= _MAX_DEPTH:
        return f"{path} nests deeper than {_MAX_DEPTH} levels"
    if id(value) in seen:
        return f"{path} contains itself (a circular reference)"
    seen.add(id(value))
    try:
        if isinstance(value, dict):
            for key, item in value.items():
                problem = _key_problem(key, path)
                if problem is None:
                    problem = _problem(item, f"{path}[{key!r}]", depth + 1, seen)
                if problem is not None:
                    return problem
        else:
            for index, item in enumerate(value):
                problem = _problem(item, f"{path}[{index}]", depth + 1, seen)
                if problem is not None:
                    return problem
    finally:
        seen.discard(id(value))
    return None


def _key_problem(key: object, path: str) -> str | None:
    where = f"the key {key!r} in {path}"
    if isinstance(key, str):
        return _text_problem(key, where)
    if key is None or isinstance(key, bool | int):
        return None
    if isinstance(key, float):
        return None if key == key and abs(key) != float("inf") else f"{where} is not JSON"
    return f"{where} is of type {type(key).__name__}; JSON keys are strings"


def _text_problem(text: str, where: str) -> str | None:
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = text[err.start : err.end]
        return (
            f"{where} holds a lone surrogate {bad!r} at index {err.start}, which is not "
            "Unicode text and cannot be encoded as UTF-8 (os.fsdecode() makes these from "
            "file names that are not UTF-8: pass such a name as "
            "os.fsencode(name).decode('utf-8', 'backslashreplace'), or its bytes as base64)"
        )
    return None


def _field_problem(kind: str, value: Any, name: str) -> str | None:
    if kind == "value":
        return value_problem(dict(value) if isinstance(value, Mapping) else value, name)
    if value is None:
        return None
    if kind == "text":
        return _text_problem(value, name) if isinstance(value, str) else f"{name} is not text"
    if kind == "counter":
        if not isinstance(value, int):
            return f"{name} is not an integer"
        if INT64_MIN <= value <= INT64_MAX:
            return None
        return f"{name} is {value}, outside the 64-bit range a store keeps (-2**63..2**63-1)"
    if isinstance(value, datetime) and value.tzinfo is not None:
        try:
            value.astimezone(UTC)
        except OverflowError:
            return f"{name} is {value.isoformat()}, which cannot be expressed in UTC"
    return None


_STEP_TEXTS = (
    "error",
    "error_type",
    "traceback",
    "decision_note",
    "decided_by",
    "id",
    "tool_name",
    "idempotency_key",
    "reversibility",
)


def _fields(change: SagaChange) -> list[tuple[str, str, str, Any]]:
    """(owner, field, kind, value) of everything a store writes, likely culprits first."""
    r, s, e = change
    out: list[tuple[str, str, str, Any]] = []
    if s is not None:
        out += [("step", name, "value", getattr(s, name)) for name in ("input", "output")]
        out.append(("step", "metadata", "value", s.metadata))
        out += [("step", name, "text", getattr(s, name)) for name in _STEP_TEXTS]
        out.append(("step", "position", "counter", s.position))
        for name in ("created_at", "updated_at", "completed_at"):
            out.append(("step", name, "time", getattr(s, name)))
        for i, a in enumerate(s.compensation_attempts):
            out += [
                ("step", f"attempts[{i}].error", "text", a.error),
                ("step", f"attempts[{i}].actor", "text", a.actor),
                ("step", f"attempts[{i}].number", "counter", a.number),
                ("step", f"attempts[{i}].started_at", "time", a.started_at),
                ("step", f"attempts[{i}].finished_at", "time", a.finished_at),
            ]
    out += [
        ("saga", "state", "value", r.state),
        ("saga", "options", "value", r.options),
        ("saga", "name", "text", r.name),
        ("saga", "id", "text", r.id),
        ("saga", "failed_step", "text", r.failed_step),
        ("saga", "lease_owner", "text", r.lease_owner),
        ("saga", "seq", "counter", r.seq),
        ("saga", "next_step_number", "counter", r.next_step_number),
        ("saga", "created_at", "time", r.created_at),
        ("saga", "updated_at", "time", r.updated_at),
        ("saga", "lease_expires_at", "time", r.lease_expires_at),
        ("event", "actor", "text", e.actor),
        ("event", "detail", "text", e.detail),
        ("event", "step_id", "text", e.step_id),
        ("event", "tool_name", "text", e.tool_name),
        ("event", "seq", "counter", e.seq),
        ("event", "at", "time", e.at),
    ]
    return out


def _where(owner: str, field: str, r: SagaRecord, s: StepSnapshot | None) -> str:
    saga = f"saga {r.name!r} (id {r.id!r})"  # repr escapes a lone surrogate
    if owner == "step" and s is not None:
        return f"{field} of step {s.id!r} ({safe_text(s.tool_name)}) of {saga}"
    if owner == "event":
        return f"the event's {field} of {saga}"
    return f"{field} of {saga}"


def change_problem(change: SagaChange) -> SerializationError | None:
    """The :class:`SerializationError` for the first value of ``change`` no store can keep."""
    r, s, _ = change
    for owner, field, kind, value in _fields(change):
        problem = _field_problem(kind, value, field)
        if problem is None:
            continue
        return SerializationError(
            f"{_where(owner, field, r, s)} cannot be stored: {problem}",
            saga_id=r.id,
            step_id=s.id if owner == "step" and s is not None else None,
            field=field if owner != "event" else f"event.{field}",
        )
    return None


def check_change(change: SagaChange) -> None:
    """Raise :class:`SerializationError` naming the saga, step and field no store can keep."""
    problem = change_problem(change)
    if problem is not None:
        raise problem


def unstorable(change: SagaChange, cause: BaseException) -> SerializationError:
    """The error for a change whose encoding failed with ``cause``: names the value at fault."""
    problem = change_problem(change)
    if problem is not None:
        return problem
    r = change.saga
    return SerializationError(
        f"a transition of saga {r.name!r} (id {r.id!r}) cannot be stored: {cause}",
        saga_id=r.id,
    )

"""undo_core's records as JSON objects: the one rule for every text boundary.

The SDK's wire format (docs/api.md), the SQLite store's journal and the MCP
server's connected mode all carry ``SagaRecord``, ``StepSnapshot`` and
``CompensationAttempt`` as JSON objects. Their keys and value conversions are
read here off the records' own field lists and annotations, so a new field in
a record reaches every boundary with no copying code:

- times are ISO 8601 in UTC (a naive time is taken to be UTC already: the
  engine's clocks are UTC);
- enums travel as their string values and come back as the annotated enum;
- mappings travel as plain objects and come back never ``None``;
- a step's ``compensation_attempts`` travel as a list named ``attempts``;
- a key missing from an object keeps the record's default.
"""

from __future__ import annotations

import functools
import operator
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from enum import Enum
from typing import Any, NamedTuple

from ..vocabulary.records import CompensationAttempt, SagaEvent, SagaRecord, StepSnapshot

__all__ = ["JSON_NAMES", "record_from_json", "record_json", "time_text"]

JSON_NAMES: Mapping[str, str] = types.MappingProxyType({"compensation_attempts": "attempts"})
"""Fields whose JSON key is not their name (the published wire format's ``attempts``)."""

_Convert = Callable[[Any], Any]
_EPOCH_FLOOR = datetime.min.replace(tzinfo=UTC)


def time_text(value: datetime | None) -> str | None:
    """A time as ISO 8601 in UTC (a naive time is taken to be UTC already)."""
    if value is None:
        return None
    return _utc_text(value)


@functools.lru_cache(maxsize=4096)
def _utc_text(value: datetime) -> str:
    # Cached: a saga's times recur in every event of it (the SDK sends some seven times
    # an event). Equal aware times are one instant, whose UTC text is one text.
    if value.tzinfo is UTC:
        return value.isoformat()
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return aware.isoformat()


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _enum_value(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _plain_dict(value: Any) -> Any:
    return None if value is None else dict(value)


def _attempts_json(value: Iterable[CompensationAttempt]) -> list[dict[str, Any]]:
    return [record_json(a) for a in value]


def _attempts(value: Iterable[Mapping[str, Any]] | None) -> tuple[CompensationAttempt, ...]:
    return tuple(record_from_json(CompensationAttempt, a) for a in value or ())


def _kinds(hint: Any) -> tuple[Any, ...]:
    return typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)


def _converters(hint: Any) -> tuple[_Convert | None, _Convert | None]:
    """(to JSON, from JSON) for one annotation; ``None`` where the value passes as it is."""
    if typing.get_origin(hint) is tuple:  # tuple[CompensationAttempt, ...]
        return _attempts_json, _attempts
    if typing.get_origin(hint) is Mapping:
        return _plain_dict, lambda value: value or {}
    for kind in _kinds(hint):
        if kind is datetime:
            return time_text, _time
        if isinstance(kind, type) and issubclass(kind, Enum):
            return _enum_value, lambda value, enum=kind: None if value is None else enum(value)
        if kind is str:  # a state named by a str field may be a StrEnum member: send its value
            return _enum_value, None
    return None, None


class _Plan(NamedTuple):
    """One record type's fields with their JSON keys and converters, worked out once."""

    fields: tuple[tuple[str, str, _Convert | None], ...]
    readers: tuple[tuple[str, str, _Convert | None], ...]
    required: tuple[str, ...]


def _plan(record: type[Any]) -> _Plan:
    hints = typing.get_type_hints(record)
    writers, readers = [], []
    for name in record._fields:
        key = JSON_NAMES.get(name, name)
        to_json, from_json = _converters(hints[name])
        writers.append((name, key, to_json))
        readers.append((name, key, from_json))
    required = tuple(n for n in record._fields if n not in record._field_defaults)
    return _Plan(tuple(writers), tuple(readers), required)


_PLANS: dict[type[Any], _Plan] = {
    record: _plan(record) for record in (SagaRecord, StepSnapshot, CompensationAttempt, SagaEvent)
}


def record_json(record: NamedTuple, skip: Iterable[str] = ()) -> dict[str, Any]:
    """The record as a JSON-ready object (values not yet checked: see ``stores.serialize``).

    ``skip`` names fields left out (by field name), e.g. the lease, which no
    event log carries.
    """
    keys, pick, converted = _writer(type(record), tuple(skip))
    out = dict(zip(keys, pick(record), strict=True))
    for key, index, to_json in converted:
        value = record[index]
        # Most converted fields are texts that might be a StrEnum member: a plain str
        # (or None) is sent as it is without a call.
        if not (to_json is _enum_value and (type(value) is str or value is None)):
            out[key] = to_json(value)
    return out


_Converted = tuple[tuple[str, int, _Convert], ...]
_Writer = tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]], _Converted]


@functools.cache
def _writer(record: type[Any], skip: tuple[str, ...]) -> _Writer:
    """``record_json``'s work for one record type and ``skip``, worked out once: the kept
    keys and a reader of all their values at once (C loops), then the fields to convert.
    The SDK encodes three records an event, so this is most of its CPU per event."""
    kept = [
        (index, key, to_json)
        for index, (name, key, to_json) in enumerate(_PLANS[record].fields)
        if name not in skip
    ]
    keys = tuple(key for _, key, _ in kept)
    indexes = [index for index, _, _ in kept]
    if len(indexes) == 1:
        only = indexes[0]
        pick: Callable[[Any], tuple[Any, ...]] = lambda r: (r[only],)  # noqa: E731
    else:
        pick = operator.itemgetter(*indexes)
    converted = tuple((key, index, to_json) for index, key, to_json in kept if to_json)
    return keys, pick, converted


def record_from_json[R: tuple[Any, ...]](record: type[R], data: Mapping[str, Any]) -> R:
    """The record an object carries; a key it lacks keeps the record's default.

    A missing field without a default is a ``KeyError`` naming it, except an
    attempt's ``started_at``, which reads as the earliest time (old journals).
    """
    plan = _PLANS[record]
    values: dict[str, Any] = {}
    for name, key, from_json in plan.readers:
        if key in data:
            value = data[key]
            values[name] = value if from_json is None else from_json(value)
    if record is CompensationAttempt:
        values["started_at"] = values.get("started_at") or _EPOCH_FLOOR
    missing = [name for name in plan.required if name not in values]
    if missing:
        raise KeyError(", ".join(missing))
    return record(**values)

"""undo_core's records as table rows: the one place their fields meet the columns.

Every field of ``SagaRecord``, ``StepSnapshot`` and ``CompensationAttempt`` is a column of
the same name on ``Saga``, ``Step`` and ``CompensationAttempt``, but for the renames below
(an id named for its table) and a step's attempts (rows of their own). The columns are read
off the records' own field lists, so a new field in the engine's record needs a column of its
name and a migration, and no copying code. Enums are stored as their values and read back as
the enum the record's annotation names; mappings are stored as plain dicts.
"""

from __future__ import annotations

import functools
import json
import operator
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from enum import Enum
from typing import Any, NamedTuple

from django.db import models
from pydantic import BaseModel

from sagaboard.models import JSONTextField
from undo_core import CompensationAttempt, SagaRecord, StepSnapshot

SAGA_RENAMED = {"id": "saga_id"}
STEP_RENAMED = {"id": "step_id"}
_NOT_RENAMED: Mapping[str, str] = types.MappingProxyType({})
STEP_OWN_ROWS = ("compensation_attempts",)
"""StepSnapshot fields kept in rows of their own (``CompensationAttempt``), not in columns."""


def _reader(hint: Any) -> Callable[[Any], Any]:
    """How a column's value becomes the field's: an enum from its value, a mapping never None."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        if isinstance(option, type) and issubclass(option, Enum):
            enum = option
            return lambda value: None if value is None else enum(value)
    if typing.get_origin(hint) is Mapping:
        return lambda value: value or {}
    return lambda value: value


def _readers(record: type[NamedTuple]) -> dict[str, Callable[[Any], Any]]:
    hints = typing.get_type_hints(record)
    return {name: _reader(hints[name]) for name in record._fields}


_READERS = {record: _readers(record) for record in (SagaRecord, StepSnapshot, CompensationAttempt)}


_AS_IS = frozenset({str, int, float, bool, type(None), datetime, list, tuple})
"""Types a column keeps as they are: one set lookup, not two isinstance checks (Mapping's is
an ABC's, the slowest kind); ingestion converts some fifty values an event."""


def stored(value: Any) -> Any:
    """A record's value as a column keeps it."""
    if type(value) in _AS_IS:
        return value
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return dict(value)
    return value


def columns(record: NamedTuple, skip: Iterable[str] = ()) -> dict[str, Any]:
    """The record's fields as ``{column: value}`` (the id, renamed per table, is the caller's)."""
    names, pick = _kept(record._fields, tuple(skip))
    as_is = _AS_IS
    return {
        name: value if type(value) in as_is else stored(value)
        for name, value in zip(names, pick(record), strict=True)
    }


@functools.cache
def _kept(
    fields: tuple[str, ...], skip: tuple[str, ...]
) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """The fields ``columns`` keeps and a reader of their values, worked out once."""
    kept = [(i, name) for i, name in enumerate(fields) if name not in skip]
    names = tuple(name for _, name in kept)
    if not kept:
        return names, lambda record: ()
    if len(kept) == 1:
        index = kept[0][0]
        return names, lambda record: (record[index],)
    return names, operator.itemgetter(*(i for i, _ in kept))


def record_from(
    record: type[Any], row: Any, renamed: Mapping[str, str] = _NOT_RENAMED, **own_rows: Any
) -> Any:
    """The record ``row`` stores; fields kept in rows of their own come in ``own_rows``."""
    values = {
        name: own_rows[name] if name in own_rows else read(getattr(row, renamed.get(name, name)))
        for name, read in _READERS[record].items()
    }
    return record(**values)


def record_of(record: type[Any], source: Any, **own_rows: Any) -> Any:
    """The record whose fields ``source`` (an event's parts) carries under the same names.

    A field ``source`` does not have keeps the record's default (an agent's saga carries no
    lease); fields kept in rows of their own come in ``own_rows``.
    """
    if isinstance(source, BaseModel):
        # Classes are hashable (the cache's keys); mypy doubts it of ``type[Any]``.
        names, read = _model_fields(record, type(source), frozenset(own_rows))  # type: ignore[arg-type]
        return record(**dict(zip(names, read(source), strict=True)), **own_rows)
    names = tuple(n for n in record._fields if n not in own_rows and hasattr(source, n))
    return record(**{name: getattr(source, name) for name in names}, **own_rows)


@functools.cache
def _model_fields(
    record: type[Any], model: type[BaseModel], own_rows: frozenset[str]
) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """The record's fields a pydantic model carries, and a reader of them all at once,
    found once per model class: every instance has the same fields, and asking an
    instance for one it lacks goes through pydantic's ``__getattr__`` (raising inside),
    some microseconds each (ingestion reads two records an event)."""
    names = tuple(
        name
        for name in record._fields
        if name not in own_rows and (name in model.model_fields or hasattr(model, name))
    )
    if len(names) == 1:
        return names, lambda source: (getattr(source, names[0]),)
    return names, operator.attrgetter(*names)


def _raw_value(field: Any) -> Callable[[Any], Any]:
    """How a raw driver value (a bulk select's row, no ORM conversion) becomes the column's."""
    if isinstance(field, JSONTextField):
        return lambda value: None if value is None else json.loads(value)
    if isinstance(field, models.DateTimeField):
        return _aware
    if isinstance(field, models.BooleanField):
        return bool
    return lambda value: value


def _aware(value: Any) -> datetime | None:
    """A time as the driver returns it: naive UTC (text) on SQLite, aware on PostgreSQL."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def raw_reader(
    model: type[models.Model],
    record: type[Any],
    fields: Iterable[str],
    renamed: Mapping[str, str] = _NOT_RENAMED,
) -> Callable[..., Any]:
    """``read(row, **own_rows)``: the record a raw row of ``model`` stores (ingestion's hot path).

    The row carries the columns of ``fields`` (and the id, renamed per table); the
    conversions come from the model's fields (JSON text, times, booleans) and the record's
    annotations (enums, mappings). Other fields keep their defaults or come in ``own_rows``.
    """
    readers = _READERS[record]
    plan = []
    for name in ("id", *fields):
        column = renamed.get(name, name)
        plan.append((name, column, _raw_value(model._meta.get_field(column)), readers[name]))

    def read_row(row: Any, **own_rows: Any) -> Any:
        values = {name: read(raw(getattr(row, column))) for name, column, raw, read in plan}
        return record(**values, **own_rows)

    return read_row


def mirrored(row: Any, fields: Iterable[str], skip: Iterable[str] = ()) -> dict[str, Any]:
    """The row's columns for these record fields, as stored (an answer's shared part)."""
    left_out = set(skip)
    return {name: getattr(row, name) for name in fields if name not in left_out}


SAGA_MIRRORED = tuple(
    name for name in SagaRecord._fields if name not in ("id", "lease_owner", "lease_expires_at")
)
"""The saga fields an event log replays to (the lease is not part of the record's history)."""
STEP_MIRRORED = tuple(name for name in StepSnapshot._fields if name != "id")
"""The step fields an event log replays to, its attempts included."""

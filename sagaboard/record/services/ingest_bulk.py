"""Many-row SELECT, INSERT and UPDATE for the ingestion path, in few statements and round trips.

The ORM's ``bulk_create``/``bulk_update`` build every row through the model
machinery (about 0.3 ms per row here) and ``bulk_update`` writes a CASE per
column; ingestion writes thousands of rows a second, so it prepares values the
way the fields themselves would and hands the driver plain tuples. Columns,
tables and value conversion still come from the models' fields.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import orjson
from django.db import connection, models

from sagaboard.models import JSONTextField

_ROWS_PER_STATEMENT = 500
_ZERO = timedelta(0)


class Table:
    """The columns of ``model`` named by ``fields``, ready for raw many-row statements."""

    def __init__(self, model: type[models.Model], fields: Sequence[str]) -> None:
        meta = model._meta
        self.fields = [meta.get_field(name) for name in fields]
        self.names = list(fields)
        self.table = connection.ops.quote_name(meta.db_table)
        self.columns = [connection.ops.quote_name(f.column) for f in self.fields]  # type: ignore[union-attr]
        self.pk = connection.ops.quote_name(meta.pk.column)  # type: ignore[union-attr]
        self.quote = connection.ops.quote_name
        self.meta = meta
        # Reading every attribute at once and converting only the columns that need it
        # is most of what makes a row cheap.
        self.get = operator.attrgetter(*self.names) if len(self.names) > 1 else None
        self.convert = [
            (i, c) for i, c in enumerate(_converter(f) for f in self.fields) if c is not None
        ]

    def row(self, obj: Any) -> tuple[Any, ...]:
        values = self.get(obj) if self.get else (getattr(obj, self.names[0]),)
        if not self.convert:
            return tuple(values)
        out = list(values)
        for i, convert in self.convert:
            out[i] = convert(out[i])
        return tuple(out)

    def insert(self, objs: Iterable[Any], returning: Sequence[str] = ()) -> Rows:
        """Insert the rows with multi-row VALUES; ``fetch()`` the ``returning`` columns.

        One statement per few hundred rows: on PostgreSQL one execution instead of one
        per row, and with ``RETURNING`` no second query to find the new keys. Rows
        come back in no promised order: return a unique column to match them by.
        """
        rows = [self.row(obj) for obj in objs]
        result = Rows(returning, None, [])
        group = f"({', '.join(['%s'] * len(self.columns))})"
        head = f"INSERT INTO {self.table} ({', '.join(self.columns)}) VALUES "
        tail = ""
        if returning:
            names = ", ".join(self.quote(self.meta.get_field(f).column) for f in returning)  # type: ignore[union-attr]
            tail = f" RETURNING {names}"
        if connection.vendor == "postgresql":
            if rows:
                # One array per column, unnested: the same short statement for any number
                # of rows, so psycopg parses it once and PostgreSQL prepares it once.
                arrays = ", ".join(f"%b::{f.db_type(connection)}[]" for f in self.fields)
                head = f"INSERT INTO {self.table} ({', '.join(self.columns)})"
                sql = f"{head} SELECT * FROM unnest({arrays}){tail}"
                result.write(sql, [list(column) for column in zip(*rows, strict=True)])
            return result
        # SQLite: a few hundred rows per statement, under its parameter and VALUES limits.
        for start in range(0, len(rows), _ROWS_PER_STATEMENT):
            chunk = rows[start : start + _ROWS_PER_STATEMENT]
            params = [value for row in chunk for value in row]
            result.write(head + ", ".join([group] * len(chunk)) + tail, params)
        return result

    def update(self, objs: Iterable[Any]) -> None:
        rows = [(*self.row(obj), obj.pk) for obj in objs]
        if rows:
            sets = ", ".join(f"{column} = %s" for column in self.columns)
            sql = f"UPDATE {self.table} SET {sets} WHERE {self.pk} = %s"
            with connection.cursor() as cursor:
                if len(rows) == 1:
                    cursor.execute(sql, rows[0])
                else:
                    cursor.executemany(sql, rows)


def table(model: type[models.Model], fields: Sequence[str]) -> Table:
    """The ``Table`` for these columns, built once per process (and database vendor)."""
    # A model class is hashable; untyped Django makes it ``type[Any]``, which mypy doubts.
    return _table(model, tuple(fields), connection.vendor)  # type: ignore[arg-type]


@functools.cache
def _table(model: type[models.Model], fields: tuple[str, ...], vendor: str) -> Table:
    return Table(model, fields)


def _converter(field: Any) -> Callable[[Any], Any] | None:
    """How the field turns a Python value into a database value; None: as it is."""
    if isinstance(field, models.DateTimeField):
        adapt = connection.ops.adapt_datetimefield_value
        if connection.vendor != "sqlite":
            return lambda value: None if value is None else adapt(value)

        @functools.lru_cache(maxsize=1024)
        def sqlite_datetime(value: Any) -> Any:
            # What Django stores on SQLite: naive UTC as text. A UTC value (all of ours)
            # takes the short way; anything else goes through Django's own adapter.
            # Cached: a batch writes its one server time (received, changed, recorded)
            # on every row, and an event's times recur in its saga's and step's rows.
            # Equal aware times are one instant, and both ways write it as naive UTC.
            if value is None:
                return None
            if value.utcoffset() == _ZERO:
                return str(value.replace(tzinfo=None))
            return adapt(value)

        return sqlite_datetime
    if isinstance(field, JSONTextField):
        return _json_text
    plain = (models.CharField, models.IntegerField, models.BooleanField, models.ForeignKey)
    if isinstance(field, plain) or type(field) is models.TextField:
        return None
    return lambda value: field.get_db_prep_save(value, connection)


_ORJSON_STRICT = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _refuse(value: Any) -> Any:
    raise TypeError(f"not JSON: {type(value).__name__}")


def _json_text(value: Any) -> str | None:
    """What ``JSONTextField`` stores, in a tenth of the time: the values written here were
    parsed from a request body (by orjson, so no NaN), anything else that orjson refuses
    (big integers, non-string keys, other types) takes the field's own way."""
    if value is None:
        return None
    try:
        return orjson.dumps(value, default=_refuse, option=_ORJSON_STRICT).decode()
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value, ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True)
class InSelect:
    """A ``where`` value: the column is IN (SELECT ``field`` FROM ``model`` WHERE ``where``)."""

    model: type[models.Model]
    field: str
    where: dict[str, Any]


def _where(model: type[models.Model], where: dict[str, Any]) -> tuple[str, list[Any]] | None:
    """SQL and parameters for ``where``; None when an empty ``IN`` list matches nothing."""
    meta, quote = model._meta, connection.ops.quote_name
    clauses, params = [], []
    for name, value in where.items():
        column = quote(meta.get_field(name).column)  # type: ignore[union-attr]
        if isinstance(value, InSelect):
            inner = _where(value.model, value.where)
            if inner is None:
                return None
            field = quote(value.model._meta.get_field(value.field).column)  # type: ignore[union-attr]
            table = quote(value.model._meta.db_table)
            clauses.append(f"{column} IN (SELECT {field} FROM {table} WHERE {inner[0]})")
            params.extend(inner[1])
        elif isinstance(value, (list, set, tuple)):
            if not value:
                return None
            if connection.vendor == "postgresql":  # one statement text whatever the count
                clauses.append(f"{column} = ANY(%s)")
                params.append(list(value))
            else:
                clauses.append(f"{column} IN ({', '.join(['%s'] * len(value))})")
                params.extend(value)
        else:
            clauses.append(f"{column} = %s")
            params.append(value)
    return " AND ".join(clauses), params


class Rows:
    """A SELECT sent to the database; its rows as namespaces once ``fetch``-ed.

    Sent inside :func:`round_trip`, several of them reach PostgreSQL together and
    their rows are read after the block.
    """

    def __init__(self, fields: Sequence[str], sql: str | None, params: list[Any]) -> None:
        self.fields = list(fields)
        self.cursors: list[Any] = []
        if sql is not None:
            self.send(sql, params)

    def send(self, sql: str, params: list[Any]) -> None:
        cursor = connection.cursor()
        cursor.execute(sql, params)
        self.cursors.append(cursor)

    def write(self, sql: str, params: list[Any]) -> None:
        """Run a write: sent like a SELECT when its rows are wanted back (``RETURNING``),
        else executed and its cursor closed at once."""
        if self.fields:
            self.send(sql, params)
        else:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)

    def fetch(self) -> list[Any]:
        found = []
        for cursor in self.cursors:
            with cursor:
                found += [
                    SimpleNamespace(**dict(zip(self.fields, row, strict=True)))
                    for row in cursor.fetchall()
                ]
        self.cursors = []
        return found


def send_select(
    model: type[models.Model],
    fields: Sequence[str],
    where: dict[str, Any],
    *,
    for_update: bool = False,
) -> Rows:
    """Rows of ``model``, without the ORM's query building; read them with ``fetch()``.

    ``where`` maps a field to a value (``=``), a list (``IN``) or an :class:`InSelect`.
    Only plain columns (text, numbers, booleans, keys) should be read this way: values
    come back as the driver gives them.
    """
    meta, quote = model._meta, connection.ops.quote_name
    condition = _where(model, where)
    if condition is None:
        return Rows(fields, None, [])
    columns = ", ".join(quote(meta.get_field(f).column) for f in fields)  # type: ignore[union-attr]
    sql = f"SELECT {columns} FROM {quote(meta.db_table)} WHERE {condition[0]}"
    if for_update and connection.features.has_select_for_update:
        sql += " FOR UPDATE"
    return Rows(fields, sql, condition[1])


@contextmanager
def round_trip() -> Iterator[None]:
    """Statements sent inside reach PostgreSQL together (a pipeline): one round trip, not
    one each; read their results after the block. Statements still run one after the
    other, in order, in the transaction. Elsewhere (SQLite runs in process) a no-op.
    """
    if connection.vendor != "postgresql":
        yield
        return
    connection.ensure_connection()
    # Errors surface when the pipeline syncs, as psycopg's own: translate them as
    # Django's cursors do (an IntegrityError stays an IntegrityError).
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield

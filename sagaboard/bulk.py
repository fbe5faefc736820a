"""Many-row INSERT and UPDATE for the ingestion path, one ``executemany`` per statement.

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
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
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

    def insert(self, objs: Iterable[Any], returning: Sequence[str] = ()) -> list[tuple[Any, ...]]:
        """Insert the rows with multi-row VALUES; the ``returning`` columns of each new row.

        One statement per few hundred rows: on PostgreSQL one execution instead of one
        per row, and with ``RETURNING`` no second query to find the new keys. Rows
        come back in no promised order: return a unique column to match them by.
        """
        rows = [self.row(obj) for obj in objs]
        if not rows:
            return []
        group = f"({', '.join(['%s'] * len(self.columns))})"
        head = f"INSERT INTO {self.table} ({', '.join(self.columns)}) VALUES "
        tail = ""
        if returning:
            names = ", ".join(self.quote(self.meta.get_field(f).column) for f in returning)  # type: ignore[union-attr]
            tail = f" RETURNING {names}"
        found: list[tuple[Any, ...]] = []
        with connection.cursor() as cursor:
            # A few hundred rows per statement: under SQLite's parameter and VALUES
            # limits, and one statement for PostgreSQL to plan (and prepare) per size.
            for start in range(0, len(rows), _ROWS_PER_STATEMENT):
                chunk = rows[start : start + _ROWS_PER_STATEMENT]
                params = [value for row in chunk for value in row]
                cursor.execute(head + ", ".join([group] * len(chunk)) + tail, params)
                if returning:
                    found += [tuple(r) for r in cursor.fetchall()]
        return found

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
    return _table(model, tuple(fields), connection.vendor)


@functools.cache
def _table(model: type[models.Model], fields: tuple[str, ...], vendor: str) -> Table:
    return Table(model, fields)


def _converter(field: Any) -> Callable[[Any], Any] | None:
    """How the field turns a Python value into a database value; None: as it is."""
    if isinstance(field, models.DateTimeField):
        adapt = connection.ops.adapt_datetimefield_value
        if connection.vendor != "sqlite":
            return lambda value: None if value is None else adapt(value)

        def sqlite_datetime(value: Any) -> Any:
            # What Django stores on SQLite: naive UTC as text. A UTC value (all of ours)
            # takes the short way; anything else goes through Django's own adapter.
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


def select(
    model: type[models.Model],
    fields: Sequence[str],
    where: dict[str, Any],
    *,
    for_update: bool = False,
) -> list[Any]:
    """Rows of ``model`` as namespaces, without the ORM's query building.

    ``where`` maps a field to a value (``=``) or to a list (``IN``). Only plain
    columns (text, numbers, booleans, keys) should be read this way: values come
    back as the driver gives them.
    """
    from types import SimpleNamespace

    meta = model._meta
    quote = connection.ops.quote_name
    columns = ", ".join(quote(meta.get_field(f).column) for f in fields)  # type: ignore[union-attr]
    clauses, params = [], []
    for name, value in where.items():
        column = quote(meta.get_field(name).column)  # type: ignore[union-attr]
        if isinstance(value, (list, set, tuple)):
            if not value:
                return []
            clauses.append(f"{column} IN ({', '.join(['%s'] * len(value))})")
            params.extend(value)
        else:
            clauses.append(f"{column} = %s")
            params.append(value)
    sql = f"SELECT {columns} FROM {quote(meta.db_table)} WHERE {' AND '.join(clauses)}"
    if for_update and connection.features.has_select_for_update:
        sql += " FOR UPDATE"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [SimpleNamespace(**dict(zip(fields, row, strict=True))) for row in cursor]

"""Many-row INSERT and UPDATE for the ingestion path, one ``executemany`` per statement.

The ORM's ``bulk_create``/``bulk_update`` build every row through the model
machinery (about 0.3 ms per row here) and ``bulk_update`` writes a CASE per
column; ingestion writes thousands of rows a second, so it prepares values the
way the fields themselves would and hands the driver plain tuples. Columns,
tables and value conversion still come from the models' fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

from django.db import connection, models

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
        self.convert = [_converter(f) for f in self.fields]

    def row(self, obj: Any) -> tuple[Any, ...]:
        return tuple(
            value if convert is None else convert(value)
            for value, convert in zip(
                [getattr(obj, name) for name in self.names], self.convert, strict=True
            )
        )

    def insert(self, objs: Iterable[Any]) -> int | None:
        """Insert the rows; for a single row, return its primary key (``RETURNING``)."""
        rows = [self.row(obj) for obj in objs]
        if not rows:
            return None
        group = f"({', '.join(['%s'] * len(self.columns))})"
        head = f"INSERT INTO {self.table} ({', '.join(self.columns)}) VALUES "
        with connection.cursor() as cursor:
            if len(rows) == 1:  # PostgreSQL and SQLite >= 3.35 both return the new key
                cursor.execute(f"{head}{group} RETURNING {self.pk}", rows[0])
                return int(cursor.fetchone()[0])
            if connection.vendor == "postgresql":
                # psycopg pipelines executemany with server-side binding: fastest there.
                cursor.executemany(head + group, rows)
                return None
            # SQLite: multi-row VALUES, a few hundred rows per statement (under its
            # parameter limit), one statement to parse instead of one per row.
            for start in range(0, len(rows), _ROWS_PER_STATEMENT):
                chunk = rows[start : start + _ROWS_PER_STATEMENT]
                params = [value for row in chunk for value in row]
                cursor.execute(head + ", ".join([group] * len(chunk)), params)
        return None

    def update(self, objs: Iterable[Any]) -> None:
        rows = [(*self.row(obj), obj.pk) for obj in objs]
        if rows:
            sets = ", ".join(f"{column} = %s" for column in self.columns)
            sql = f"UPDATE {self.table} SET {sets} WHERE {self.pk} = %s"
            with connection.cursor() as cursor:
                cursor.executemany(sql, rows)


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
    plain = (models.CharField, models.IntegerField, models.BooleanField, models.ForeignKey)
    if isinstance(field, plain) or type(field) is models.TextField:
        return None
    return lambda value: field.get_db_prep_save(value, connection)


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

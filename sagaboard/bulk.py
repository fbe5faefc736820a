"""Many-row INSERT and UPDATE for the ingestion path, one ``executemany`` per statement.

The ORM's ``bulk_create``/``bulk_update`` build every row through the model
machinery (about 0.3 ms per row here) and ``bulk_update`` writes a CASE per
column; ingestion writes thousands of rows a second, so it prepares values the
way the fields themselves would and hands the driver plain tuples. Columns,
tables and value conversion still come from the models' fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import connection, models


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

    def insert(self, objs: Iterable[Any]) -> None:
        rows = [self.row(obj) for obj in objs]
        if rows:
            marks = ", ".join(["%s"] * len(self.columns))
            sql = f"INSERT INTO {self.table} ({', '.join(self.columns)}) VALUES ({marks})"
            with connection.cursor() as cursor:
                cursor.executemany(sql, rows)

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
        return lambda value: None if value is None else adapt(value)
    plain = (models.CharField, models.IntegerField, models.BooleanField, models.ForeignKey)
    if isinstance(field, plain) or type(field) is models.TextField:
        return None
    return lambda value: field.get_db_prep_save(value, connection)

"""Events committed on SQLite by this process: a signal sent after the commit (the live wake).

The live relay (``sagaboard.live.relay``) reads the event log when it is woken. On
PostgreSQL a trigger NOTIFYs at commit (migration 0021), whoever wrote the row; SQLite
has no such thing, so every SQLite connection of this process gets an execute wrapper
that notices an ``INSERT`` into the event table and, once per transaction, registers
``transaction.on_commit`` to send ``events_committed``. A rolled-back transaction drops
the callback with the rest, so it wakes nobody; raw SQL through Django's cursors (the
bulk ingest) is seen like the ORM's. Nothing is trusted from the wake: the relay
re-reads the log, so a missed one (SQL by hand, another tool) costs only the poll.

The wrapper is one function call and a prefix test per statement; the per-connection
cost is a list insert (a TEMP trigger calling back into Python costs a third of a
millisecond per connection, and under ASGI each request opens one).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.dispatch import Signal

events_committed = Signal()
"""Sent (no arguments) after a transaction that inserted events committed, on SQLite."""

_PENDING = "_sagaboard_event_wake_pending"


def watcher(table: str) -> Callable[..., None]:
    """A ``connection_created`` receiver that watches inserts into ``table`` on SQLite."""
    insert = re.compile(rf'\s*INSERT\s+(?:OR\s+\w+\s+)?INTO\s+"?{re.escape(table)}"?[\s(]', re.I)
    quick = f'INSERT INTO "{table}"'

    def wrap(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if sql.startswith(quick) or (sql[:6].upper() == "INSERT" and insert.match(sql)):
            _committed_soon(context["connection"])
        return result

    def watch(sender: Any, connection: Any, **kwargs: Any) -> None:
        # First in the list: Django's ``execute_wrapper()`` pops the last one on exit,
        # so a connection opened inside one must not have ours appended after it.
        if connection.vendor == "sqlite" and wrap not in connection.execute_wrappers:
            connection.execute_wrappers.insert(0, wrap)

    return watch


def _committed_soon(connection: Any) -> None:
    """Send ``events_committed`` when this transaction commits (once per transaction)."""
    if not connection.in_atomic_block:
        if connection.get_autocommit():
            _send()  # the statement was its own transaction: committed already
        return  # manual transaction management: the relay's poll finds it
    # Django replaces ``run_on_commit`` with a new list at each commit and rollback (and
    # when a savepoint rolls back), so "our callback is in this list" is an identity test.
    if getattr(connection, _PENDING, None) is not connection.run_on_commit:
        connection.on_commit(_send)
        setattr(connection, _PENDING, connection.run_on_commit)


def _send() -> None:
    events_committed.send(sender=None)

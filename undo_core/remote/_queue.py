"""The outbox of ``SagaboardStore``: events waiting to be acknowledged, oldest first.

Two implementations with one interface. :class:`MemoryQueue` is a bounded
deque. :class:`SpoolQueue` keeps the events in a local SQLite file (stdlib
``sqlite3``, WAL) from the moment ``apply`` returns until the server
acknowledged them, so a process that exits or is killed leaves them on disk
for the next store on the same file. Neither is thread-safe: the store guards
both with its own lock.

Every event gets a *number*, increasing and never reused (the spool's
``AUTOINCREMENT`` row id), so "everything up to number N is acknowledged" is
one comparison with the number at the head of the queue.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from pathlib import Path
from typing import NamedTuple, Protocol

from ..stores.paths import ensure_file_folder
from ..vocabulary.errors import StoreError

__all__ = ["Item", "MemoryQueue", "Outbox", "SpoolQueue"]


class Item(NamedTuple):
    """One queued event: its number and its JSON text."""

    number: int
    payload: str


class Outbox(Protocol):
    def full(self) -> bool: ...
    def put(self, payload: str) -> int: ...
    def peek(self, limit: int, max_bytes: int) -> list[Item]: ...
    def remove_through(self, number: int) -> int: ...
    def head(self) -> int | None: ...
    def last(self) -> int: ...
    def __len__(self) -> int: ...
    def close(self) -> None: ...


def _take(items: list[Item], limit: int, max_bytes: int) -> list[Item]:
    """The first items under both limits (always at least one, so a big event still goes)."""
    out: list[Item] = []
    size = 0
    for item in items:
        size += len(item.payload) + 1
        if out and (len(out) >= limit or size > max_bytes):
            break
        out.append(item)
    return out


class MemoryQueue:
    """At most ``max_items`` events in memory; lost if the process ends before they are sent."""

    def __init__(self, max_items: int) -> None:
        self._items: deque[Item] = deque()
        self._max = max_items
        self._last = 0

    def full(self) -> bool:
        return len(self._items) >= self._max

    def put(self, payload: str) -> int:
        self._last += 1
        self._items.append(Item(self._last, payload))
        return self._last

    def peek(self, limit: int, max_bytes: int) -> list[Item]:
        head = [self._items[i] for i in range(min(limit, len(self._items)))]
        return _take(head, limit, max_bytes)

    def remove_through(self, number: int) -> int:
        removed = 0
        while self._items and self._items[0].number <= number:
            self._items.popleft()
            removed += 1
        return removed

    def head(self) -> int | None:
        return self._items[0].number if self._items else None

    def last(self) -> int:
        return self._last

    def __len__(self) -> int:
        return len(self._items)

    def close(self) -> None:
        self._items.clear()


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


_SPOOL_SCHEMA = """
CREATE TABLE IF NOT EXISTS sagaboard_spool (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    payload TEXT NOT NULL
);
"""


class SpoolQueue:
    """Events in a SQLite file until acknowledged; bounded by the disk, not by memory.

    ``synchronous=NORMAL`` in WAL mode: an insert that returned survives the
    process being killed (not a power cut). One live store per spool file: two
    processes draining one spool at once would send the same events twice.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        ensure_file_folder(path, "the sagaboard spool", "spool=", "sagaboard.spool")
        try:
            self._db = sqlite3.connect(
                self.path, timeout=10.0, isolation_level=None, check_same_thread=False
            )
            # A row that is not UTF-8 (written by something else, or damaged) must not make
            # every read fail: it reads with its bad bytes as lone surrogates, which the
            # sender recognises as unsendable, reports and drops (the others go on).
            self._db.text_factory = _text
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SPOOL_SCHEMA)
            low, high, count = self._db.execute(
                "SELECT MIN(id), MAX(id), COUNT(*) FROM sagaboard_spool"
            ).fetchone()
        except sqlite3.Error as err:
            raise StoreError(f"cannot open the sagaboard spool {self.path!r}: {err}") from err
        self._head: int | None = low
        self._last: int = high or 0
        self._count: int = count

    def full(self) -> bool:
        return False

    def put(self, payload: str) -> int:
        try:
            cur = self._db.execute("INSERT INTO sagaboard_spool (payload) VALUES (?)", (payload,))
        except sqlite3.Error as err:
            raise StoreError(f"cannot write to the sagaboard spool {self.path!r}: {err}") from err
        number = cur.lastrowid
        assert number is not None
        self._last = number
        self._count += 1
        if self._head is None:
            self._head = number
        return number

    def peek(self, limit: int, max_bytes: int) -> list[Item]:
        rows = self._db.execute(
            "SELECT id, payload FROM sagaboard_spool ORDER BY id LIMIT ?", (limit,)
        ).fetchall()
        return _take([Item(n, p) for n, p in rows], limit, max_bytes)

    def remove_through(self, number: int) -> int:
        removed = self._db.execute("DELETE FROM sagaboard_spool WHERE id <= ?", (number,)).rowcount
        self._count -= removed
        row = self._db.execute("SELECT MIN(id) FROM sagaboard_spool").fetchone()
        self._head = row[0]
        return removed

    def head(self) -> int | None:
        return self._head

    def last(self) -> int:
        return self._last

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        self._db.close()

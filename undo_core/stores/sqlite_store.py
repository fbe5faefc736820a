"""``SQLiteStore``: sagas in a local SQLite file (stdlib ``sqlite3``, WAL), for crash recovery.

Layout: an append-only **journal** (one row per transition, the saga's event
log) is the source of truth for steps; a small ``undo_sagas`` row per saga holds
what must be found without replaying (status, lease, options). A step
transition appends one journal row (rowid order, plus a small unique index on
``(saga_id, seq)``) instead of rewriting saga and step rows: fewer dirty pages
per commit.

Several processes may share one file: each change is one ``BEGIN IMMEDIATE``
transaction, and a write from a process that lost the saga's lease, or that
carries a stale sequence number, is refused (fencing).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from ..vocabulary.errors import LeaseError, StoreError
from ..vocabulary.records import EventKind, SagaRecord, SagaSnapshot, StepSnapshot
from ..vocabulary.states import StepState
from .paths import ensure_file_folder
from .record_json import record_from_json, record_json, time_text
from .rules import MOVABLE
from .serialize import INT64_MAX, INT64_MIN, check_counters, json_text, unstorable
from .storage import UNFINISHED_STATUSES, SagaChange

__all__ = ["SQLiteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS undo_sagas (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    options TEXT NOT NULL,
    lease_owner TEXT,
    lease_expires_at TEXT
);
CREATE INDEX IF NOT EXISTS undo_sagas_status ON undo_sagas (status, created_at);
CREATE TABLE IF NOT EXISTS undo_journal (
    id INTEGER PRIMARY KEY,
    saga_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    step_id TEXT,
    tool_name TEXT,
    from_state TEXT,
    to_state TEXT NOT NULL,
    at TEXT NOT NULL,
    actor TEXT,
    detail TEXT,
    saga TEXT NOT NULL,
    step TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS undo_journal_saga_seq ON undo_journal (saga_id, seq);
"""

_FENCE = """
SELECT lease_owner, lease_expires_at,
       (SELECT MAX(seq) FROM undo_journal WHERE saga_id = ?1)
FROM undo_sagas WHERE id = ?1
"""

_UPSERT_SAGA = """
INSERT INTO undo_sagas (id, name, status, created_at, options, lease_owner, lease_expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    status = excluded.status, options = excluded.options,
    lease_owner = excluded.lease_owner, lease_expires_at = excluded.lease_expires_at
"""

_RENEW_LEASE = "UPDATE undo_sagas SET lease_owner = ?, lease_expires_at = ? WHERE id = ?"

_INSERT_JOURNAL = """
INSERT INTO undo_journal (saga_id, seq, kind, step_id, tool_name, from_state, to_state, at,
                          actor, detail, saga, step)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""


def _storable_columns(row: tuple[Any, ...]) -> None:
    """Check a row's plain columns as :func:`json_text` checks JSON (sqlite3 would fail later)."""
    for value in row:
        if type(value) is str and not value.isascii():
            value.encode("utf-8")  # UnicodeEncodeError on a lone surrogate
        elif type(value) is int and not INT64_MIN <= value <= INT64_MAX:
            raise OverflowError(f"{value} does not fit a SQLite INTEGER")


_STEP_MOVES = (*MOVABLE, "compensation_attempts")
"""What a step's later journal rows carry: what may change after its creation (``rules``)."""
_FIXED = tuple(name for name in StepSnapshot._fields if name not in _STEP_MOVES)
"""Written once, in the row that adds the step (its id is the row's ``step_id`` column)."""
_FIXED_NO_OUTPUT = (*_FIXED, "output")
_NEW_SKIPS: tuple[str, ...] = ("id",)


def _step_json(s: StepSnapshot, *, new: bool) -> str:
    """The step's fields for one journal row: all of them when new, else those a move changes.

    The output is fixed once the step completes, so only the row that completes it carries it.
    """
    if new:
        skip = _NEW_SKIPS
    elif s.state is StepState.COMPLETED:
        skip = _FIXED
    else:
        skip = _FIXED_NO_OUTPUT
    return json_text(record_json(s, skip=skip))


class SQLiteStore:
    """A :class:`~undo_core.SagaStore` in one SQLite file (or ``":memory:"``).

    ``synchronous="NORMAL"`` (the default) survives a killed process; use
    ``"FULL"`` to also survive a power cut, at the price of an fsync per change.
    """

    def __init__(
        self, path: str | Path, *, timeout: float = 30.0, synchronous: str = "NORMAL"
    ) -> None:
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.path = str(path)
        self._lock = threading.RLock()
        ensure_file_folder(path, "the SQLite store", "SQLiteStore(path)", "sagas.sqlite3")
        try:
            self._db = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._db.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
            self._db.executescript(_SCHEMA)
            self._writer = self._db.cursor()
        except sqlite3.Error as err:
            raise StoreError(f"cannot open SQLite store {self.path!r}: {err}") from err

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ writes

    def apply(self, change: SagaChange) -> None:
        # Serialise first, so a value that cannot be stored fails before any write,
        # as a SerializationError naming it (the one rule of undo_core.stores.serialize).
        try:
            saga_row, journal_row = self._rows(change)
        except (TypeError, ValueError, OverflowError) as err:
            raise unstorable(change, err) from err
        r = change.saga
        with self._lock:
            db = self._writer  # one cursor for every write: no cursor made per statement
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    self._fence_and_lease(db, r, saga_row is None)
                    if saga_row is not None:
                        db.execute(_UPSERT_SAGA, saga_row)
                    db.execute(_INSERT_JOURNAL, journal_row)
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            except sqlite3.Error as err:
                raise StoreError(f"SQLite write failed for saga {r.id!r}: {err}") from err

    @staticmethod
    def _rows(change: SagaChange) -> tuple[tuple[Any, ...] | None, tuple[Any, ...]]:
        """The ``undo_sagas`` row (only for a saga-level change) and the journal row."""
        r, step, e = change
        check_counters(change)
        tail = {"next_step_number": r.next_step_number, "failed_step": r.failed_step}
        if r.state is not None:
            tail["state"] = r.state
        saga_json = json_text(tail)
        step_json = None
        if step is not None:
            new = e.kind is EventKind.STEP and e.from_state is None
            step_json = _step_json(step, new=new)
        saga_row = None
        if step is None:
            options = json_text(dict(r.options))
            lease = (r.lease_owner, time_text(r.lease_expires_at))
            saga_row = (r.id, r.name, r.status.value, time_text(r.created_at), options, *lease)
            _storable_columns(saga_row)
        journal_row = (
            r.id,
            e.seq,
            e.kind.value,
            e.step_id,
            e.tool_name,
            e.from_state,
            e.to_state,
            time_text(e.at),
            e.actor,
            e.detail,
            saga_json,
            step_json,
        )
        _storable_columns((*journal_row, r.lease_owner))  # the lease: renewed on step changes
        return saga_row, journal_row

    def _fence_and_lease(self, db: sqlite3.Cursor, r: SagaRecord, step_only: bool) -> None:
        """Refuse a stale writer; store the lease when the engine renewed it."""
        row = db.execute(_FENCE, (r.id,)).fetchone()
        if row is None:
            if step_only:
                raise StoreError(f"saga {r.id!r} is not in the store")
            return
        owner, expires, last_seq = row
        if owner not in (None, r.lease_owner) or (last_seq is not None and r.seq <= last_seq):
            raise LeaseError(
                f"saga {r.id!r} is leased by {owner!r}, or was changed since this process "
                f"({r.lease_owner!r}) read it"
            )
        wanted = time_text(r.lease_expires_at)
        if step_only and (owner != r.lease_owner or expires != wanted):
            db.execute(_RENEW_LEASE, (r.lease_owner, wanted, r.id))

    def acquire_lease(
        self, saga_id: str, owner: str, expires_at: datetime, *, expected_owner: str | None
    ) -> bool:
        with self._lock:
            try:
                cur = self._db.execute(
                    "UPDATE undo_sagas SET lease_owner = ?, lease_expires_at = ? "
                    "WHERE id = ? AND (lease_owner IS ? OR lease_owner = ?)",
                    (owner, time_text(expires_at), saga_id, expected_owner, owner),
                )
            except sqlite3.Error as err:
                raise StoreError(f"SQLite lease update failed: {err}") from err
            return cur.rowcount == 1

    def release_lease(self, saga_id: str, owner: str) -> None:
        with self._lock:
            try:
                self._db.execute(
                    "UPDATE undo_sagas SET lease_owner = NULL, lease_expires_at = NULL "
                    "WHERE id = ? AND lease_owner = ?",
                    (saga_id, owner),
                )
            except sqlite3.Error as err:
                raise StoreError(f"SQLite lease release failed: {err}") from err

    # ------------------------------------------------------------ reads

    def load(self, saga_id: str) -> SagaSnapshot | None:
        with self._lock:
            try:
                row = self._db.execute(
                    "SELECT name, status, created_at, options, lease_owner, lease_expires_at "
                    "FROM undo_sagas WHERE id = ?",
                    (saga_id,),
                ).fetchone()
                if row is None:
                    return None
                journal = self._db.execute(
                    "SELECT seq, at, step_id, saga, step FROM undo_journal "
                    "WHERE saga_id = ? ORDER BY seq",
                    (saga_id,),
                ).fetchall()
            except sqlite3.Error as err:
                raise StoreError(f"SQLite read failed for saga {saga_id!r}: {err}") from err
        steps: dict[str, dict[str, Any]] = {}
        for _seq, _at, step_id, _saga, step in journal:
            if step is not None:
                steps.setdefault(step_id, {}).update(json.loads(step))
        last_seq, last_at, _, last_saga, _ = (
            journal[-1] if journal else (0, row[2], None, "{}", None)
        )
        record = record_from_json(
            SagaRecord,
            {
                **json.loads(last_saga),
                "id": saga_id,
                "name": row[0],
                "status": row[1],
                "created_at": row[2],
                "updated_at": last_at,
                "seq": last_seq,
                "options": json.loads(row[3]),
                "lease_owner": row[4],
                "lease_expires_at": row[5],
            },
        )
        snapshots = sorted(
            (
                record_from_json(StepSnapshot, {**fields, "id": step_id})
                for step_id, fields in steps.items()
                if "position" in fields  # a step whose creation was never stored
            ),
            key=lambda s: s.position,
        )
        return SagaSnapshot(record=record, steps=tuple(snapshots))

    def list_unfinished(self) -> list[str]:
        marks = ",".join("?" for _ in UNFINISHED_STATUSES)
        with self._lock:
            try:
                rows = self._db.execute(
                    f"SELECT id FROM undo_sagas WHERE status IN ({marks}) ORDER BY created_at",
                    [s.value for s in UNFINISHED_STATUSES],
                ).fetchall()
            except sqlite3.Error as err:
                raise StoreError(f"SQLite read failed: {err}") from err
        return [r[0] for r in rows]

    def events(self, saga_id: str) -> list[dict[str, Any]]:
        """Every event of one saga, in order, as dicts (for inspection and tests)."""
        with self._lock:
            cur = self._db.execute(
                "SELECT seq, kind, step_id, tool_name, from_state, to_state, at, actor, detail "
                "FROM undo_journal WHERE saga_id = ? ORDER BY seq",
                (saga_id,),
            )
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

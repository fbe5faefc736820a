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

from .errors import LeaseError, StoreError
from .records import (
    AttemptOutcome,
    CompensationAttempt,
    EventKind,
    SagaRecord,
    SagaSnapshot,
    StepSnapshot,
)
from .serialize import INT64_MAX, INT64_MIN, check_counters, json_text, unstorable
from .states import SagaStatus, StepState
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
       (SELECT MAX(seq) FROM undo_journal WHERE saga_id = :id)
FROM undo_sagas WHERE id = :id
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

_TIMES = frozenset({"created_at", "updated_at", "completed_at"})


def _ts(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def _storable_columns(row: tuple[Any, ...]) -> None:
    """Check a row's plain columns as :func:`json_text` checks JSON (sqlite3 would fail later)."""
    for value in row:
        if type(value) is str and not value.isascii():
            value.encode("utf-8")  # UnicodeEncodeError on a lone surrogate
        elif type(value) is int and not INT64_MIN <= value <= INT64_MAX:
            raise OverflowError(f"{value} does not fit a SQLite INTEGER")


def _attempt_dict(a: CompensationAttempt) -> dict[str, Any]:
    return {
        "number": a.number,
        "started_at": _ts(a.started_at),
        "finished_at": _ts(a.finished_at),
        "outcome": a.outcome,
        "error": a.error,
        "actor": a.actor,
    }


def _attempt(a: dict[str, Any]) -> CompensationAttempt:
    return CompensationAttempt(
        number=a["number"],
        started_at=_dt(a["started_at"]) or datetime.min,
        finished_at=_dt(a["finished_at"]),
        outcome=AttemptOutcome(a["outcome"]) if a["outcome"] else None,
        error=a["error"],
        actor=a["actor"],
    )


def _step_json(s: StepSnapshot, *, new: bool) -> str:
    """The step's fields for one journal row: all of them when new, else those that change."""
    fields: dict[str, Any] = {
        "state": s.state.value,
        "error": s.error,
        "error_type": s.error_type,
        "traceback": s.traceback,
        "updated_at": _ts(s.updated_at),
        "completed_at": _ts(s.completed_at),
        "attempts": [_attempt_dict(a) for a in s.compensation_attempts],
        "decision_note": s.decision_note,
        "decided_by": s.decided_by,
    }
    if new or s.state is StepState.COMPLETED:
        fields["output"] = s.output
    if new:
        fields.update(
            position=s.position,
            tool_name=s.tool_name,
            input=s.input,
            has_undo=s.has_undo,
            requires_approval=s.requires_approval,
            reversibility=s.reversibility,
            idempotency_key=s.idempotency_key,
            created_at=_ts(s.created_at),
            metadata=dict(s.metadata),
        )
    return json_text(fields)


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
        try:
            self._db = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._db.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
            self._db.executescript(_SCHEMA)
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
        # as a SerializationError naming it (the one rule of undo_core.serialize).
        try:
            saga_row, journal_row = self._rows(change)
        except (TypeError, ValueError, OverflowError) as err:
            raise unstorable(change, err) from err
        r = change.saga
        with self._lock:
            db = self._db
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
            lease = (r.lease_owner, _ts(r.lease_expires_at))
            saga_row = (r.id, r.name, r.status.value, _ts(r.created_at), options, *lease)
            _storable_columns(saga_row)
        journal_row = (
            r.id,
            e.seq,
            e.kind.value,
            e.step_id,
            e.tool_name,
            e.from_state,
            e.to_state,
            _ts(e.at),
            e.actor,
            e.detail,
            saga_json,
            step_json,
        )
        _storable_columns((*journal_row, r.lease_owner))  # the lease: renewed on step changes
        return saga_row, journal_row

    def _fence_and_lease(self, db: sqlite3.Connection, r: SagaRecord, step_only: bool) -> None:
        """Refuse a stale writer; store the lease when the engine renewed it."""
        row = db.execute(_FENCE, {"id": r.id}).fetchone()
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
        wanted = _ts(r.lease_expires_at)
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
                    (owner, _ts(expires_at), saga_id, expected_owner, owner),
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
        tail = json.loads(last_saga)
        record = SagaRecord(
            id=saga_id,
            name=row[0],
            status=SagaStatus(row[1]),
            created_at=_dt(row[2]) or datetime.min,
            updated_at=_dt(last_at) or datetime.min,
            seq=last_seq,
            next_step_number=tail.get("next_step_number", 1),
            options=json.loads(row[3]),
            state=tail.get("state"),
            failed_step=tail.get("failed_step"),
            lease_owner=row[4],
            lease_expires_at=_dt(row[5]),
        )
        snapshots = sorted(
            (
                self._step(step_id, fields)
                for step_id, fields in steps.items()
                if "position" in fields  # a step whose creation was never stored
            ),
            key=lambda s: s.position,
        )
        return SagaSnapshot(record=record, steps=tuple(snapshots))

    @staticmethod
    def _step(step_id: str, f: dict[str, Any]) -> StepSnapshot:
        times = {name: _dt(f.get(name)) for name in _TIMES}
        return StepSnapshot(
            id=step_id,
            position=f["position"],
            tool_name=f["tool_name"],
            state=StepState(f["state"]),
            input=f["input"],
            output=f.get("output"),
            error=f["error"],
            error_type=f["error_type"],
            traceback=f["traceback"],
            has_undo=f["has_undo"],
            requires_approval=f["requires_approval"],
            reversibility=f["reversibility"],
            idempotency_key=f["idempotency_key"],
            created_at=times["created_at"],
            updated_at=times["updated_at"],
            completed_at=times["completed_at"],
            compensation_attempts=tuple(_attempt(a) for a in f["attempts"]),
            decision_note=f["decision_note"],
            decided_by=f["decided_by"],
            metadata=f["metadata"],
        )

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

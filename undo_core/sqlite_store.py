"""``SQLiteStore``: sagas in a local SQLite file (stdlib ``sqlite3``, WAL), for crash recovery.

Several processes may share one file: each change is one ``BEGIN IMMEDIATE``
transaction, and a write from a process that lost the saga's lease is refused
(fencing), so a recovered saga cannot be overwritten by its presumed-dead owner.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from .errors import LeaseError, SerializationError, StoreError
from .records import (
    AttemptOutcome,
    CompensationAttempt,
    EventKind,
    SagaRecord,
    SagaSnapshot,
    StepSnapshot,
)
from .states import SagaStatus, StepState
from .storage import UNFINISHED_STATUSES, SagaChange

__all__ = ["SQLiteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS undo_sagas (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    seq INTEGER NOT NULL,
    next_step_number INTEGER NOT NULL,
    options TEXT NOT NULL,
    state TEXT,
    failed_step TEXT,
    lease_owner TEXT,
    lease_expires_at TEXT
);
CREATE INDEX IF NOT EXISTS undo_sagas_status ON undo_sagas (status, created_at);
CREATE TABLE IF NOT EXISTS undo_steps (
    saga_id TEXT NOT NULL REFERENCES undo_sagas (id),
    step_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    tool_name TEXT NOT NULL,
    state TEXT NOT NULL,
    input TEXT,
    output TEXT,
    error TEXT,
    error_type TEXT,
    traceback TEXT,
    has_undo INTEGER NOT NULL,
    requires_approval INTEGER NOT NULL,
    reversibility TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    created_at TEXT,
    updated_at TEXT,
    completed_at TEXT,
    attempts TEXT NOT NULL,
    decision_note TEXT,
    decided_by TEXT,
    metadata TEXT NOT NULL,
    PRIMARY KEY (saga_id, step_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS undo_events (
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
    PRIMARY KEY (saga_id, seq)
) WITHOUT ROWID;
"""

_UPSERT_SAGA = """
INSERT INTO undo_sagas (id, name, status, created_at, updated_at, seq, next_step_number,
                        options, state, failed_step, lease_owner, lease_expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    status = excluded.status, updated_at = excluded.updated_at, seq = excluded.seq,
    next_step_number = excluded.next_step_number, options = excluded.options,
    state = excluded.state, failed_step = excluded.failed_step,
    lease_owner = excluded.lease_owner, lease_expires_at = excluded.lease_expires_at
WHERE (undo_sagas.lease_owner IS NULL OR undo_sagas.lease_owner = excluded.lease_owner)
    AND undo_sagas.seq < excluded.seq
"""

# A step transition touches only the saga's clock, sequence and lease (and a
# declarative saga's checkpointed state): a narrow UPDATE keeps the status index
# untouched. Both saga writes carry the fence: the caller must hold the lease (or
# nobody does) and bring a newer seq.
_TOUCH_SAGA = """
UPDATE undo_sagas SET updated_at = ?, seq = ?, next_step_number = ?, state = ?,
    lease_owner = ?, lease_expires_at = ?
WHERE id = ? AND (lease_owner IS NULL OR lease_owner = ?) AND seq < ?
"""

_INSERT_STEP = """
INSERT INTO undo_steps (saga_id, step_id, idx, tool_name, state, input, output,
    error, error_type, traceback, has_undo, requires_approval, reversibility, idempotency_key,
    created_at, updated_at, completed_at, attempts, decision_note, decided_by, metadata)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

# Input, metadata and the step's identity never change after the PENDING insert.
_UPDATE_STEP = """
UPDATE undo_steps SET state = ?, output = ?, error = ?, error_type = ?, traceback = ?,
    updated_at = ?, completed_at = ?, attempts = ?, decision_note = ?, decided_by = ?
WHERE saga_id = ? AND step_id = ?
"""

_INSERT_EVENT = """
INSERT INTO undo_events (saga_id, seq, kind, step_id, tool_name, from_state, to_state, at,
                         actor, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""


def _ts(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def _dumps(value: Any, what: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise SerializationError(f"{what} is not JSON-serialisable: {err}") from err


def _attempts_json(attempts: tuple[CompensationAttempt, ...]) -> str:
    return json.dumps(
        [
            {
                "number": a.number,
                "started_at": _ts(a.started_at),
                "finished_at": _ts(a.finished_at),
                "outcome": a.outcome,
                "error": a.error,
                "actor": a.actor,
            }
            for a in attempts
        ]
    )


def _attempts(raw: str) -> tuple[CompensationAttempt, ...]:
    return tuple(
        CompensationAttempt(
            number=a["number"],
            started_at=_dt(a["started_at"]) or datetime.min,
            finished_at=_dt(a["finished_at"]),
            outcome=AttemptOutcome(a["outcome"]) if a["outcome"] else None,
            error=a["error"],
            actor=a["actor"],
        )
        for a in json.loads(raw)
    )


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

    def _saga_row(self, r: SagaRecord) -> tuple[Any, ...]:
        return (
            r.id,
            r.name,
            r.status.value,
            _ts(r.created_at),
            _ts(r.updated_at),
            r.seq,
            r.next_step_number,
            _dumps(r.options, f"options of saga {r.id!r}"),
            self._state_json(r),
            r.failed_step,
            r.lease_owner,
            _ts(r.lease_expires_at),
        )

    @staticmethod
    def _state_json(r: SagaRecord) -> str | None:
        return _dumps(r.state, f"state of saga {r.name!r}") if r.state is not None else None

    @staticmethod
    def _step_insert_row(r: SagaRecord, s: StepSnapshot) -> tuple[Any, ...]:
        where = f"step {s.id!r} ({s.tool_name}) of saga {r.name!r}"
        return (
            r.id,
            s.id,
            s.position,
            s.tool_name,
            s.state.value,
            _dumps(s.input, f"input of {where}"),
            _dumps(s.output, f"output of {where}"),
            s.error,
            s.error_type,
            s.traceback,
            int(s.has_undo),
            int(s.requires_approval),
            s.reversibility,
            s.idempotency_key,
            _ts(s.created_at),
            _ts(s.updated_at),
            _ts(s.completed_at),
            _attempts_json(s.compensation_attempts),
            s.decision_note,
            s.decided_by,
            _dumps(s.metadata, f"metadata of {where}"),
        )

    @staticmethod
    def _step_update_row(r: SagaRecord, s: StepSnapshot) -> tuple[Any, ...]:
        where = f"step {s.id!r} ({s.tool_name}) of saga {r.name!r}"
        return (
            s.state.value,
            _dumps(s.output, f"output of {where}"),
            s.error,
            s.error_type,
            s.traceback,
            _ts(s.updated_at),
            _ts(s.completed_at),
            _attempts_json(s.compensation_attempts),
            s.decision_note,
            s.decided_by,
            r.id,
            s.id,
        )

    def apply(self, change: SagaChange) -> None:
        r, step, e = change
        # Serialise everything first, so a value that is not JSON fails before any write.
        if step is None:
            saga_sql, saga_row = _UPSERT_SAGA, self._saga_row(r)
        else:
            saga_sql = _TOUCH_SAGA
            saga_row = (
                _ts(r.updated_at),
                r.seq,
                r.next_step_number,
                self._state_json(r),
                r.lease_owner,
                _ts(r.lease_expires_at),
                r.id,
                r.lease_owner,
                r.seq,
            )
            new_step = e.kind is EventKind.STEP and e.from_state is None
            step_sql = _INSERT_STEP if new_step else _UPDATE_STEP
            step_row = (
                self._step_insert_row(r, step) if new_step else self._step_update_row(r, step)
            )
        event_row = (
            e.saga_id,
            e.seq,
            e.kind.value,
            e.step_id,
            e.tool_name,
            e.from_state,
            e.to_state,
            _ts(e.at),
            e.actor,
            e.detail,
        )
        with self._lock:
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    if db.execute(saga_sql, saga_row).rowcount != 1:
                        raise LeaseError(
                            f"saga {r.id!r} is leased by another process, or was changed by "
                            f"one since this one ({r.lease_owner!r}) read it"
                        )
                    if step is not None and db.execute(step_sql, step_row).rowcount != 1:
                        raise StoreError(f"step {step.id!r} of saga {r.id!r} is not in the store")
                    db.execute(_INSERT_EVENT, event_row)
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            except sqlite3.Error as err:
                raise StoreError(f"SQLite write failed for saga {r.id!r}: {err}") from err

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
                    "SELECT id, name, status, created_at, updated_at, seq, next_step_number, "
                    "options, state, failed_step, lease_owner, lease_expires_at "
                    "FROM undo_sagas WHERE id = ?",
                    (saga_id,),
                ).fetchone()
                if row is None:
                    return None
                steps = self._db.execute(
                    "SELECT step_id, idx, tool_name, state, input, output, error, error_type, "
                    "traceback, has_undo, requires_approval, reversibility, idempotency_key, "
                    "created_at, updated_at, completed_at, attempts, decision_note, decided_by, "
                    "metadata FROM undo_steps WHERE saga_id = ? ORDER BY idx",
                    (saga_id,),
                ).fetchall()
            except sqlite3.Error as err:
                raise StoreError(f"SQLite read failed for saga {saga_id!r}: {err}") from err
        record = SagaRecord(
            id=row[0],
            name=row[1],
            status=SagaStatus(row[2]),
            created_at=_dt(row[3]) or datetime.min,
            updated_at=_dt(row[4]) or datetime.min,
            seq=row[5],
            next_step_number=row[6],
            options=json.loads(row[7]),
            state=json.loads(row[8]) if row[8] is not None else None,
            failed_step=row[9],
            lease_owner=row[10],
            lease_expires_at=_dt(row[11]),
        )
        return SagaSnapshot(record, tuple(self._step(s) for s in steps))

    @staticmethod
    def _step(s: tuple[Any, ...]) -> StepSnapshot:
        return StepSnapshot(
            id=s[0],
            position=s[1],
            tool_name=s[2],
            state=StepState(s[3]),
            input=json.loads(s[4]) if s[4] is not None else None,
            output=json.loads(s[5]) if s[5] is not None else None,
            error=s[6],
            error_type=s[7],
            traceback=s[8],
            has_undo=bool(s[9]),
            requires_approval=bool(s[10]),
            reversibility=s[11],
            idempotency_key=s[12],
            created_at=_dt(s[13]),
            updated_at=_dt(s[14]),
            completed_at=_dt(s[15]),
            compensation_attempts=_attempts(s[16]),
            decision_note=s[17],
            decided_by=s[18],
            metadata=json.loads(s[19]),
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
                "FROM undo_events WHERE saga_id = ? ORDER BY seq",
                (saga_id,),
            )
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

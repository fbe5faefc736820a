"""The WAL keeper: a request's connection closing must not checkpoint and delete the log."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace

from sagaboard.infra import sqlite_wal


def _wal_database(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE t (x)")
    db.close()


def _one_request(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("INSERT INTO t VALUES (1)")
    db.commit()
    db.close()


def _django_connection(path: Path, **settings: object) -> SimpleNamespace:
    return SimpleNamespace(vendor="sqlite", settings_dict={"NAME": str(path), **settings})


def test_without_a_keeper_the_last_close_deletes_the_log(tmp_path: Path) -> None:
    path = tmp_path / "plain.sqlite3"
    _wal_database(path)
    _one_request(path)
    assert not Path(f"{path}-wal").exists()


def test_the_keeper_keeps_the_log_across_request_connections(tmp_path: Path) -> None:
    path = tmp_path / "kept.sqlite3"
    _wal_database(path)
    sqlite_wal.keep_wal_open(None, _django_connection(path))
    assert sqlite_wal.kept_open(str(path))
    _one_request(path)
    assert Path(f"{path}-wal").exists()
    with sqlite3.connect(path) as db:  # and what the request wrote is there
        assert db.execute("SELECT count(*) FROM t").fetchone() == (1,)


def test_no_keeper_for_a_test_database_or_a_missing_file(tmp_path: Path) -> None:
    test_db = tmp_path / "test.sqlite3"
    _wal_database(test_db)
    sqlite_wal.keep_wal_open(None, _django_connection(test_db, TEST={"NAME": str(test_db)}))
    missing = tmp_path / "missing.sqlite3"
    sqlite_wal.keep_wal_open(None, _django_connection(missing))
    assert not sqlite_wal.kept_open(str(test_db))
    assert not sqlite_wal.kept_open(str(missing))
    assert not missing.exists()  # the keeper never creates a database

"""Backup and restore, as docs/operations.md says to do them: the restored database is the
same record, and it proves it (``sagaboard_verify`` and ``sagaboard_verify --audit`` pass on
it, and its audit chains end at the same head hashes as the original's).

Runs against a throw-away database of the suite's kind: PostgreSQL with ``pg_dump`` /
``pg_restore`` (custom format), SQLite with ``sqlite3 .backup`` (online, WAL-safe).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.live_server import manage, temp_database

pytestmark = pytest.mark.slow  # real databases and subprocesses

KIND = "postgres" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"
COUNTS = (
    "from sagaboard.models import AuditEntry, Event, Saga, Step; "
    "print([m.objects.count() for m in (Saga, Step, Event, AuditEntry)])"
)


def backup(url: str, to: Path) -> None:
    """docs/operations.md, "Backing up"."""
    if KIND == "postgres":
        subprocess.run(["pg_dump", "--format=custom", f"--file={to}", url], check=True)
    else:
        database = url.removeprefix("sqlite:///")
        subprocess.run(["sqlite3", database, f".backup '{to}'"], check=True)


def restore(dump: Path, url: str) -> None:
    """docs/operations.md, "Restoring" (into an empty database)."""
    if KIND == "postgres":
        subprocess.run(
            ["pg_restore", "--no-owner", "--exit-on-error", f"--dbname={url}", str(dump)],
            check=True,
        )
    else:
        Path(url.removeprefix("sqlite:///")).write_bytes(dump.read_bytes())


def heads(verify_output: str) -> list[str]:
    return [line for line in verify_output.splitlines() if line.startswith("audit chain")]


def test_a_restored_backup_is_the_same_record_and_verifies(tmp_path: Path) -> None:
    with temp_database(KIND, tmp_path) as original, temp_database(KIND, tmp_path) as restored:
        manage(original, "migrate", "--no-input", "-v0")
        manage(original, "sagaboard_demo")
        manage(original, "sagaboard_token", "create", "demo", "--label", "backup")
        dump = tmp_path / "sagaboard.dump"
        backup(original, dump)
        restore(dump, restored)

        manage(restored, "migrate", "--no-input", "-v0")  # nothing to apply: same version
        assert manage(restored, "shell", "-c", COUNTS) == manage(original, "shell", "-c", COUNTS)
        replayed = manage(restored, "sagaboard_verify")
        assert " 0 difference(s)" in replayed, replayed
        audit_restored = manage(restored, "sagaboard_verify", "--audit")
        audit_original = manage(original, "sagaboard_verify", "--audit")
    assert audit_restored.endswith("0 break(s)"), audit_restored
    assert heads(audit_restored) == heads(audit_original) and heads(audit_original)

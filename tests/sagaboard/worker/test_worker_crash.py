"""A Celery worker killed in the middle of an undo: the next worker finishes it, same key.

Real worker processes (``celery -A sagaboard worker --pool=solo``: the task runs in the
worker's main process, so SIGKILL takes the undo down with it, unacknowledged, and
leaves the saga's lease naming a dead pid), a Redis broker, and a throw-away database
(PostgreSQL when the test run uses PostgreSQL, else SQLite) migrated with the real
``migrate``. The undo is ``crashtest.undo`` (``crash_compensations.py``): it logs every
call with its idempotency key, and its first call waits until the worker is killed.

Redis keeps a killed worker's unacknowledged task for its visibility timeout (an hour by
default), so the work comes back through the beat's sweep (``runner.orphaned_work``):
a COMPENSATING saga whose lease ran out and that nobody touched for 30 s. The lease
is set to 10 s here (``SAGABOARD_WORKER_LEASE_SECONDS``, 60 s by default) so that
the 30 s staleness window is the only wait.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.support.live_server import (
    REDIS_SERVER,
    ROOT,
    Worker,
    manage,
    redis_database,
    temp_database,
)
from undo_core.engine.recovery import owner_is_gone
from undo_core.vocabulary.records import SagaRecord
from undo_core.vocabulary.states import SagaStatus

pytestmark = pytest.mark.slow

REDIS = os.environ.get("SAGABOARD_TEST_REDIS_URL", REDIS_SERVER)  # a server, or an index
LEASE_SECONDS = 10
WAIT = 60.0


def _kind() -> str:
    url = os.environ.get("DATABASE_URL", "")
    return "postgres" if url.startswith(("postgres", "postgresql", "pgsql")) else "sqlite"


# ---------------------------------------------------------------- reading the database


class Db:
    """Plain SQL on the throw-away database (the test process's Django uses its own)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        if self.url.startswith("sqlite:///"):
            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=20)
            try:
                return conn.execute(sql.replace("%s", "?"), params).fetchall()
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(self.url) as conn:
            return conn.execute(sql, params).fetchall()

    def saga(self, pk: int) -> tuple[str, str | None, datetime | None]:
        status, owner, expires = self.rows(
            "SELECT status, lease_owner, lease_expires_at FROM sagaboard_saga WHERE id = %s", pk
        )[0]
        return status, owner, _when(expires)

    def states(self, pk: int) -> dict[str, str]:
        return dict(self.rows("SELECT step_id, state FROM sagaboard_step WHERE saga_id = %s", pk))

    def attempts(self, pk: int) -> list[tuple[str, int, str | None, datetime]]:
        rows = self.rows(
            "SELECT s.step_id, a.number, a.outcome, a.started_at"
            " FROM sagaboard_compensationattempt a JOIN sagaboard_step s ON a.step_id = s.id"
            " WHERE s.saga_id = %s ORDER BY s.step_id, a.number",
            pk,
        )
        return [(s, n, o, _when(at)) for s, n, o, at in rows]  # type: ignore[misc]

    def step_events(self, pk: int) -> list[tuple[str, str | None, str, datetime]]:
        rows = self.rows(
            "SELECT step_id, from_state, to_state, at FROM sagaboard_event"
            " WHERE saga_id = %s AND kind = 'step' ORDER BY seq",
            pk,
        )
        return [(s, f, t, _when(at)) for s, f, t, at in rows]  # type: ignore[misc]


def _when(value: Any) -> Any:
    """SQLite hands back text (UTC), PostgreSQL an aware datetime."""
    if isinstance(value, str):
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    return value


# ---------------------------------------------------------------- workers


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_for(
    condition: Callable[[], Any],
    what: str,
    alive: list[Worker],
    everyone: list[Worker],
    timeout: float = WAIT,
) -> Any:
    """Poll ``condition`` until true; fail early if a worker in ``alive`` exits."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        dead = [w.name for w in alive if w.proc.poll() is not None]
        if dead or time.monotonic() > deadline:
            logs = "\n".join(f"--- worker {w.name}\n{w.tail()}" for w in everyone)
            why = f"worker {dead[0]} exited" if dead else f"timed out after {timeout:g} s"
            raise AssertionError(f"{why} waiting for {what}\n{logs}")
        time.sleep(0.2)


@pytest.fixture
def crash_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    # The index is the test's own (flushed after: the killed worker's unacked message too).
    with redis_database(REDIS) as broker:
        yield _crash_env(tmp_path, broker)


def _crash_env(tmp_path: Path, broker: str) -> dict[str, str]:
    queue = f"sagaboard-crash-{uuid.uuid4().hex[:10]}"
    (tmp_path / "crash").mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
        "DATABASE_URL": "",  # set per worker: the throw-away database
        "DJANGO_SETTINGS_MODULE": "tests.support.crash_settings",
        "SAGABOARD_TEST_QUEUE": queue,
        "CELERY_BROKER_URL": broker,
        "SAGABOARD_COMPENSATION_MODULES": "tests.support.crash_compensations",
        "SAGABOARD_CRASH_DIR": str(tmp_path / "crash"),
        "SAGABOARD_WORKER_LEASE_SECONDS": str(LEASE_SECONDS),
        "SAGABOARD_TASKS_EAGER": "0",
    }
    env.pop("REDIS_URL", None)
    return env


# ---------------------------------------------------------------- the crash


def test_a_worker_killed_mid_undo_is_finished_by_the_next_worker_with_the_same_key(
    tmp_path: Path, crash_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("PYTHONPATH", "SAGABOARD_TEST_QUEUE", "CELERY_BROKER_URL",
                 "SAGABOARD_COMPENSATION_MODULES", "SAGABOARD_CRASH_DIR"):  # fmt: skip
        monkeypatch.setenv(name, crash_env[name])  # for manage(): it runs with os.environ
    monkeypatch.delenv("REDIS_URL", raising=False)
    crash_dir = Path(crash_env["SAGABOARD_CRASH_DIR"])
    calls_file = crash_dir / "calls.jsonl"

    def calls() -> list[dict[str, Any]]:
        if not calls_file.exists():
            return []
        return [json.loads(line) for line in calls_file.read_text().splitlines() if line]

    workers: list[Worker] = []
    with temp_database(_kind(), tmp_path) as url:
        try:
            manage(url, "migrate", "--no-input", "-v0", settings="tests.support.crash_settings")
            out = manage(
                url, "shell", "--no-imports", "-c",
                "from tests.support import crash_saga; crash_saga.main()",
                settings="tests.support.crash_settings",
            )  # fmt: skip
            made = json.loads(out.splitlines()[-1])
            pk, keys = made["saga_pk"], made["keys"]
            assert made["status"] == "COMPENSATING"
            db = Db(url)

            # Worker A takes the rollback; the newest undo (charge_card) starts and waits.
            a = Worker("a", {**crash_env, "DATABASE_URL": url}, tmp_path, beat=False)
            workers.append(a)
            wait_for(lambda: (crash_dir / "running").exists(), "the undo to start in A",
                     [a], workers)  # fmt: skip
            assert int((crash_dir / "running").read_text()) == a.pid  # in A's main process
            status, owner, _ = db.saga(pk)
            assert status == "COMPENSATING" and owner and f":{a.pid}:" in owner
            assert db.states(pk) == {
                "step-1": "COMPLETED", "step-2": "COMPENSATING", "step-3": "FAILED",
            }  # fmt: skip
            assert db.attempts(pk) == []

            a.crash()
            killed_at = datetime.now(UTC)
            # Nothing claims the undo happened: it did not finish.
            assert db.states(pk)["step-2"] == "COMPENSATING"
            assert db.saga(pk)[0] == "COMPENSATING"
            assert not _pid_alive(a.pid)

            # Worker B (with the beat, whose sweep finds orphaned work) takes over.
            b = Worker("b", {**crash_env, "DATABASE_URL": url}, tmp_path, beat=True)
            workers.append(b)
            wait_for(lambda: db.saga(pk)[0] == "ROLLED_BACK", "the rollback to finish in B",
                     [b], workers)  # fmt: skip
        finally:
            for w in workers:
                w.stop()

        seen = calls()
        enters = [(c["pid"], c["step"], c["key"]) for c in seen if c["event"] == "enter"]
        assert enters == [
            (a.pid, "step-2", keys["step-2"]),  # interrupted by the kill
            (b.pid, "step-2", keys["step-2"]),  # run again, with the SAME idempotency key
            (b.pid, "step-1", keys["step-1"]),  # then the rest of the rollback, in order
        ], seen
        exits = {(c["pid"], c["step"]): c["t"] for c in seen if c["event"] == "exit"}
        assert (a.pid, "step-2") not in exits
        assert db.states(pk) == {
            "step-1": "ROLLED_BACK", "step-2": "ROLLED_BACK", "step-3": "FAILED",
        }  # fmt: skip
        status, owner, _ = db.saga(pk)
        assert (status, owner) == ("ROLLED_BACK", None)
        attempts = db.attempts(pk)
        succeeded = [(s, started) for s, _, o, started in attempts if o == "succeeded"]
        assert [s for s, _ in succeeded] == ["step-1", "step-2"], attempts
        assert all(started >= killed_at for _, started in succeeded)  # both B's
        # Today the worker does not record A's interrupted attempt (the undo simply runs
        # again, with the same key); if it ever does, it must say "interrupted".
        assert {o for *_, o, _ in attempts} <= {"succeeded", "interrupted"}, attempts
        # Marked ROLLED_BACK once per step, and only after the undo came back.
        done = [(s, at) for s, _, to, at in db.step_events(pk) if to == "ROLLED_BACK"]
        assert [s for s, _ in done] == ["step-2", "step-1"]
        for step_id, at in done:
            assert at.timestamp() >= exits[(b.pid, step_id)] - 0.001, (step_id, at, exits)
        # A worker killed mid-undo leaves nothing in the record that its log does not replay.
        verified = manage(url, "sagaboard_verify", settings="tests.support.crash_settings")
        assert "event(s) replayed: 0 difference(s);" in verified, verified


# ---------------------------------------------------------------- a dead worker's lease


@pytest.mark.django_db(transaction=True)
def test_a_dead_workers_lease_is_taken_over_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.contrib.auth.models import Group, Permission

    from sagaboard.access.services.roles import roles_sync
    from sagaboard.actions.services import runner
    from sagaboard.infra import jobs
    from sagaboard.models import Project, Saga
    from tests.support.hitl import storebot_server_saga

    send = jobs.enqueue_now

    def not_the_rollback(name: str, *args: Any, countdown: float | None = None) -> None:
        if name != jobs.ROLLBACK_CONTINUE:  # no broker here: the test runs the worker
            send(name, *args, countdown=countdown)

    monkeypatch.setattr(jobs, "enqueue_now", not_the_rollback)
    roles_sync(Group, Permission)
    saga = storebot_server_saga(
        Project.objects.create(slug="shop", name="Shop"), refund_needs_approval=False
    )
    # A worker process attaches (takes the lease) and dies without letting go.
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        url = f"sqlite:///{db['NAME']}"
    else:
        login = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
        url = f"postgres://{login}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    script = (
        "import os, signal, sys, django; django.setup()\n"
        "from sagaboard.actions.services import runner\n"
        "from sagaboard.models import Saga\n"
        "saga = Saga.objects.select_related('project').get(pk=int(sys.argv[1]))\n"
        "with runner.attached(saga):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "sagaboard.config.settings"}
    died = subprocess.run(
        [sys.executable, "-c", script, str(saga.pk)], cwd=ROOT, env=env, timeout=60, check=False
    )
    assert died.returncode == -signal.SIGKILL, (url, died)
    saga.refresh_from_db()
    owner = saga.lease_owner
    assert owner and saga.lease_expires_at and saga.lease_expires_at > datetime.now(UTC)
    pid = int(owner.split(":")[1])  # host:pid:nonce:worker
    assert owner.startswith(f"{socket.gethostname()}:{pid}:") and owner.endswith(":worker")
    assert not _pid_alive(pid)
    record = SagaRecord(
        saga.saga_id, saga.name, SagaStatus.COMPENSATING, saga.created_at, saga.updated_at,
        lease_owner=owner, lease_expires_at=saga.lease_expires_at,
    )  # fmt: skip
    # The sweep lists it at once (its holder is a dead process of this host), and the
    # next worker takes the saga over at once and finishes it.
    assert ("saga", saga.pk) in runner.orphaned_work()
    try:
        outcome = runner.rollback_continue(saga.pk)
    except runner.Busy as busy:
        gone = owner_is_gone(record, datetime.now(UTC))
        pytest.fail(f"{busy}: but pid {pid} is dead (owner_is_gone() says {gone})")
    assert outcome == "ROLLED_BACK"
    assert Saga.objects.get(pk=saga.pk).status == "ROLLED_BACK"

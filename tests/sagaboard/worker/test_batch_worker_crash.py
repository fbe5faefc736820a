"""A Celery worker SIGKILLed in the middle of a batch job: a second worker finishes it, and
every item is acted on exactly once.

Real worker processes (``celery -A sagaboard worker --pool=solo``: the job runs in the
worker's main process, so SIGKILL stops it between two SQL statements, as the OOM killer
would), a Redis broker on a queue of the test's own, and a throw-away database (PostgreSQL
when the run uses PostgreSQL, else SQLite) migrated with the real ``migrate``.

The job is a "leave failed" over 30 failed undos, processed 3 at a time with a pause
between chunks (``SAGABOARD_BATCH_CHUNK``, ``SAGABOARD_BATCH_PAUSE_SECONDS``), so worker A
is killed with some items done and the rest not. Redis keeps A's unacknowledged task for
its visibility timeout (an hour), so the job comes back through worker B's beat: the sweep
(``batches.batch_orphans``) sees that the job's lease names a dead process of this host and
queues it again at once; B skips the items that have an outcome.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.live_server import (
    REDIS_SERVER,
    ROOT,
    Worker,
    manage,
    redis_database,
    temp_database,
)

pytestmark = pytest.mark.slow

REDIS = os.environ.get("SAGABOARD_TEST_REDIS_URL", REDIS_SERVER)  # a server, or an index
SETTINGS = "tests.support.crash_settings"
ITEMS = 30
WAIT = 90.0


def _kind() -> str:
    url = os.environ.get("DATABASE_URL", "")
    return "postgres" if url.startswith(("postgres", "postgresql", "pgsql")) else "sqlite"


def _rows(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Plain SQL on the throw-away database (this process's Django uses its own)."""
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=20)
        try:
            return conn.execute(sql.replace("%s", "?"), params).fetchall()
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchall()


def _wait(condition: Any, what: str, alive: Worker, everyone: list[Worker]) -> Any:
    deadline = time.monotonic() + WAIT
    while not (value := condition()):
        if not alive.alive() or time.monotonic() > deadline:
            logs = "\n".join(f"--- worker {w.name}\n{w.tail()}" for w in everyone)
            raise AssertionError(f"gave up waiting for {what}\n{logs}")
        time.sleep(0.1)
    return value


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    # The index is the test's own (flushed after: the killed worker's unacked message too).
    with redis_database(REDIS) as broker:
        yield _env(monkeypatch, broker)


def _env(monkeypatch: pytest.MonkeyPatch, broker: str) -> dict[str, str]:
    queue = f"sagaboard-batch-crash-{uuid.uuid4().hex[:10]}"
    extra = {
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
        "SAGABOARD_TEST_QUEUE": queue,
        "CELERY_BROKER_URL": broker,
        "SAGABOARD_TASKS_EAGER": "0",
        "SAGABOARD_BATCH_CHUNK": "3",
        "SAGABOARD_BATCH_PAUSE_SECONDS": "0.3",
        "SAGABOARD_WORKER_LEASE_SECONDS": "60",  # a long lease: only the dead pid frees it
    }
    for name, value in extra.items():
        monkeypatch.setenv(name, value)  # manage() runs with os.environ
    monkeypatch.delenv("REDIS_URL", raising=False)
    return {**os.environ, **extra, "DJANGO_SETTINGS_MODULE": SETTINGS}


def test_a_worker_killed_mid_batch_is_finished_by_another_and_each_item_is_done_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    workers: list[Worker] = []
    with temp_database(_kind(), tmp_path) as url:
        try:
            manage(url, "migrate", "--no-input", "-v0", settings=SETTINGS)
            out = manage(
                url,
                "shell",
                "--no-imports",
                "-c",
                f"from tests.support import batch_world; batch_world.crash_seed({ITEMS})",
                settings=SETTINGS,
            )
            seeded = json.loads(out.splitlines()[-1])
            job, steps = seeded["job"], seeded["steps"]

            def job_row() -> tuple[Any, ...]:
                return _rows(
                    url,
                    "SELECT state, done, lease_owner FROM sagaboard_batchjob WHERE id = %s",
                    job,
                )[0]

            def items_done() -> int:
                return _rows(
                    url,
                    "SELECT COUNT(*) FROM sagaboard_batchitem WHERE job_id = %s AND outcome <> ''",
                    job,
                )[0][0]

            a = Worker("a", {**env, "DATABASE_URL": url}, tmp_path, beat=False)
            workers.append(a)
            _wait(lambda: items_done() >= 7, "worker A to do some items", a, workers)
            a.crash()
            state, _, owner = job_row()
            before = items_done()
            assert state == "running" and owner and f":{a.pid}:" in owner, (state, owner)
            assert 7 <= before < ITEMS, before

            b = Worker("b", {**env, "DATABASE_URL": url}, tmp_path, beat=True)
            workers.append(b)
            _wait(lambda: job_row()[0] == "finished", "worker B to finish the job", b, workers)
        finally:
            for w in workers:
                w.stop()

        state, done, owner = job_row()
        assert (state, done, owner) == ("finished", ITEMS, None)
        outcomes = _rows(
            url, "SELECT target_pk, outcome FROM sagaboard_batchitem WHERE job_id = %s", job
        )
        assert sorted(pk for pk, _ in outcomes) == sorted(steps)
        assert {o for _, o in outcomes} == {"succeeded"}  # none refused as "already left"
        # Each step left exactly once: one audit entry each, tagged with the job.
        left = _rows(
            url, "SELECT target, data FROM sagaboard_auditentry WHERE action = 'step.leave'"
        )
        assert len(left) == ITEMS and len({t for t, _ in left}) == ITEMS
        assert all(json.loads(d)["batch"] == job for _, d in left)
        assert (
            _rows(url, "SELECT COUNT(*) FROM sagaboard_step WHERE left_at IS NOT NULL")[0][0]
            == ITEMS
        )
        ends = _rows(
            url,
            "SELECT action FROM sagaboard_auditentry WHERE target = %s ORDER BY id",
            f"batch:{job}",
        )
        assert [a for (a,) in ends] == ["batch.start", "batch.finish"]

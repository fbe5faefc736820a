"""Batch operation throughput: ``python -m benchmarks.batch [--quick] [--db sqlite] [--items N]``.

A "force-resolve" over a filter matching 10,000 failed undos (``--quick``: 500), on a
throw-away database, each run over failures of its own (``tests.support.batch_world``:
sagas the agent runs, so a resolve is a request its SDK carries out, and what is measured
is sagaboard's own work per item: the permission and state re-check, the conditional
update, the audit entry and timeline event, the item's outcome):

* **freeze**: confirming the batch: the filter resolved to ids, 10,000 ``BatchItem`` rows
  written, the job audited, in items per second;
* **eager**: ``batches.batch_run`` in this process (chunks of ``SAGABOARD_BATCH_CHUNK``),
  items per second;
* **worker**: a real ``celery worker --pool=solo`` (Redis broker, a queue of the run's own),
  from the confirm's commit to the job's ``finishing`` (every resolve requested; the
  agents' SDKs carry them out), items per second (includes the broker's dispatch and the
  worker's own reads);
* floor: the same action on the same number of items through ``steps_act_many`` (the
  selection's bulk action, one request, no job), so the ratio is what the job's
  bookkeeping (its item rows, chunks, lease, counts) costs on top of the actions.

The worker figure needs Redis (``SAGABOARD_TEST_REDIS_URL``, default db 5 on localhost);
without it the figure is left out.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks import report
from tests.support.live_server import Worker, manage, temp_database

FULL = 10_000
QUICK = 500
SETTINGS = "tests.support.crash_settings"  # sagaboard's, on a Celery queue of the run's own
REDIS = os.environ.get("SAGABOARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/5")
GROUP = "Batch operations"
FLOOR = "the same resolves through steps_act_many (no job)"


def main(argv: list[str] | None = None) -> None:
    parser = report.cli((__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--db",
        choices=["sqlite", "postgres"],
        action="append",
        help="database (repeatable); default both, SQLite only with --quick",
    )
    parser.add_argument("--items", type=int, default=0, help="items per batch (default 10,000)")
    parser.add_argument("--no-worker", action="store_true", help="skip the real worker run")
    args = parser.parse_args(argv)  # fmt: skip
    figures = report.per_database("benchmarks.batch", args, argv, measure_database, timeout=3000)
    report.emit(figures, args.json)


def measure_database(kind: str, args: Any) -> list[report.Figure]:
    size = args.items or (QUICK if args.quick else FULL)
    queue = f"sagaboard-bench-batch-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp, temp_database(kind, Path(tmp)) as url:
        os.environ.update(
            DATABASE_URL=url, DJANGO_SETTINGS_MODULE=SETTINGS, SAGABOARD_DEBUG="0",
            SAGABOARD_LOG_FORMAT="text", SAGABOARD_TEST_QUEUE=queue, CELERY_BROKER_URL=REDIS,
            SAGABOARD_TASKS_EAGER="0",
        )  # fmt: skip
        os.environ.pop("REDIS_URL", None)
        os.environ.setdefault("SAGABOARD_SECRET_KEY", "bench-only-not-secret-0123456789abcdef")
        manage(url, "migrate", "--no-input", "-v0", settings=SETTINGS)
        import django

        django.setup()
        worker = None
        if not args.no_worker and _redis_up():
            worker = Worker("batch-bench", {**os.environ}, Path(tmp), beat=False)
            worker.wait_ready()
        try:
            return _measure(kind, size, args.runs, worker)
        finally:
            if worker is not None:
                worker.stop()
            _redis_cleanup(queue)


def _redis_up() -> bool:
    try:
        import redis

        return bool(redis.Redis.from_url(REDIS, socket_connect_timeout=1).ping())
    except Exception:  # no Redis: no worker figure
        return False


def _redis_cleanup(queue: str) -> None:
    if not _redis_up():
        return
    import redis

    client = redis.Redis.from_url(REDIS)
    try:
        client.delete(*{queue, *client.scan_iter(match=f"*{queue}*")})
    finally:
        client.close()


class _World:
    """A project per run, ``size`` fresh failed undos in it, an operator of it."""

    def __init__(self) -> None:
        from django.contrib.auth.models import Group, Permission

        from sagaboard.access.services.roles import roles_sync

        roles_sync(Group, Permission)
        self.n = 0

    def fresh(self, size: int) -> tuple[Any, Any]:
        from sagaboard.models import Project
        from tests.support.batch_world import failed_undos
        from tests.support.hitl import person

        self.n += 1
        project = Project.objects.create(slug=f"b{self.n}", name=f"Bench {self.n}")
        failed_undos(project, size, prefix=f"b{self.n}")
        return project, person(f"op-{self.n}", "operator", project)


def _measure(kind: str, size: int, runs: int, worker: Worker | None) -> list[report.Figure]:
    from django.http import QueryDict

    from sagaboard.actions.services import operator_actions
    from sagaboard.batches.services import batches
    from sagaboard.infra import jobs
    from sagaboard.models import BatchJob, Step

    world = _World()
    freeze, eager, floor, real = [], [], [], []
    for run in range(runs):
        project, user = world.fresh(size)
        query = QueryDict(f"project={project.slug}")
        queued = jobs._on_commit
        jobs._on_commit = lambda name, *a: None  # type: ignore[assignment]  # run it here
        try:
            began = time.perf_counter()
            job = batches.batch_create(user=user, action="resolve", query=query,
                                       reason="bench", expected=size)  # fmt: skip
            freeze.append(size / (time.perf_counter() - began))
            began = time.perf_counter()
            # Every resolve requested; the agents' SDKs carry them out (none runs here).
            assert batches.batch_run(job.pk) == "finishing"
            eager.append(size / (time.perf_counter() - began))
        finally:
            jobs._on_commit = queued  # type: ignore[method-assign]
        job.refresh_from_db()
        assert job.counts == {"requested": size}, job.counts

        project, user = world.fresh(size)
        pks = list(Step.objects.filter(saga__project=project).values_list("pk", flat=True))
        began = time.perf_counter()
        operator_actions.steps_act_many(step_pks=pks, user=user, action="resolve", reason="b")
        floor.append(size / (time.perf_counter() - began))

        if worker is not None:
            project, user = world.fresh(size)
            began = time.perf_counter()
            job = batches.batch_create(user=user, action="resolve",
                                       query=QueryDict(f"project={project.slug}"),
                                       reason="bench", expected=size)  # fmt: skip
            while BatchJob.objects.get(pk=job.pk).state != "finishing":  # requests made
                worker.check_alive()
                if time.perf_counter() - began > 1200:
                    raise RuntimeError(f"worker run timed out:\n{worker.tail()}")
                time.sleep(0.02)
            real.append(size / (time.perf_counter() - began))
        print(f"{kind} run {run + 1}: freeze {freeze[-1]:,.0f}/s, eager {eager[-1]:,.0f}/s, "
              f"floor {floor[-1]:,.0f}/s" + (f", worker {real[-1]:,.0f}/s" if real else ""),
              flush=True)  # fmt: skip
    db = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[kind]
    key, n = f"batch.{kind}.{size // 1000}k", f"{size:,}"
    note = f"force-resolve of {n} failed undos, chunks of 50"
    figures = [
        report.Figure(f"{key}.freeze", GROUP, f"{db}: confirm (freeze {n} items), items/s",
                      "items/s", freeze, better="higher", note=note),
        report.Figure(f"{key}.eager", GROUP, f"{db}: run in-process, items/s", "items/s",
                      eager, better="higher", floor_label=FLOOR, floor_samples=floor,
                      note=note),
    ]  # fmt: skip
    if real:
        worker_note = f"{note}; Redis broker, solo pool"
        figures.append(
            report.Figure(f"{key}.worker", GROUP, f"{db}: run by a Celery worker, items/s",
                          "items/s", real, better="higher", floor_label=FLOOR,
                          floor_samples=floor, note=worker_note)
        )  # fmt: skip
    return figures


if __name__ == "__main__":
    main()

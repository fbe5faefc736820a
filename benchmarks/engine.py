"""Per-step overhead of undo_core's stores: ``python -m benchmarks.engine``.

One "step" is the whole life a step has in a rolled-back saga: execute, record
(PENDING, COMPLETED), roll back (COMPENSATING, ROLLED_BACK), in sagas of ten
steps. Each figure is measured ``--runs`` times, each run beside its floor:

* MemoryStore: the engine's own cost; floor, bare calls of the same execute and
  undo functions (what a program without the engine would run).
* SQLiteStore: four durable transitions a step; floor, raw ``sqlite3`` single-row
  commits with the same pragmas (WAL, synchronous=NORMAL, BEGIN IMMEDIATE). A
  transition cannot be cheaper than one such commit, so "per transition" over it
  is what the store adds.
* DjangoStore (``sagaboard.engine.services.django_store``, what the server and its workers
  use), on a
  migrated throw-away SQLite file and PostgreSQL database: floor, raw single-row
  commits on that database (``sqlite3`` with Django's pragmas, or ``psycopg``
  with its default server-side binding, as sagaboard's settings use). Each
  database runs in a process of its own: Django is set up once, for one database.
  Per transition it is also set beside the floor a Django programmer would pick: a
  raw ORM transaction writing the same rows (``transaction.atomic()``, the saga
  row's UPDATE, the step row's UPDATE, the event's INSERT; no logic), with the most
  SQL statements one transition took (BEGIN and COMMIT included).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.subrun import figures_of
from tests.support.live_server import manage, temp_database
from undo_core import MemoryStore, Saga, SagaStore, SQLiteStore, define_tool

STEPS_PER_SAGA = 10
TRANSITIONS_PER_STEP = 4  # PENDING, COMPLETED, COMPENSATING, ROLLED_BACK: a commit each
GROUP = "Engine"
DJANGO_DBS = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def _execute(x: Any) -> Any:
    return x


def _undo(out: Any, x: Any) -> None:
    return None


TOOL = define_tool("bench", _execute, _undo)


# ---------------------------------------------------------------- what is timed


def bare_calls(steps: int) -> float:
    started = time.perf_counter()
    for i in range(steps):
        _execute(i)
    for i in range(steps):
        _undo(i, i)
    return time.perf_counter() - started


def saga_steps(make_store: Callable[[], SagaStore], steps: int, budget: float) -> float:
    """Microseconds per step over ``steps`` steps, or as many whole sagas as fit ``budget`` s."""
    store = make_store()
    done = 0
    started = time.perf_counter()
    while done < steps:
        saga = Saga("bench", store=store)
        for i in range(STEPS_PER_SAGA):
            saga.execute(TOOL, i)
        saga.rollback()
        done += STEPS_PER_SAGA
        if time.perf_counter() - started > budget:
            break
    elapsed = time.perf_counter() - started
    close = getattr(store, "close", None)
    if close is not None:
        close()
    return us_per(elapsed, done)


def raw_sqlite_commits(path: Path, commits: int) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, saga TEXT, body TEXT)")
    started = time.perf_counter()
    for i in range(commits):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t (saga, body) VALUES (?, ?)", ("bench", f'{{"i": {i}}}'))
        db.execute("COMMIT")
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


def raw_psycopg_commits(url: str, commits: int) -> float:
    import psycopg

    with psycopg.connect(url) as db:
        db.execute("CREATE TABLE IF NOT EXISTS bench_raw (id BIGSERIAL PRIMARY KEY, "
                   "saga TEXT, body TEXT)")  # fmt: skip
        db.commit()
        started = time.perf_counter()
        for i in range(commits):
            db.execute("INSERT INTO bench_raw (saga, body) VALUES (%s, %s)",
                       ("bench", f'{{"i": {i}}}'))  # fmt: skip
            db.commit()
        return time.perf_counter() - started


def us_per(seconds: float, count: int) -> float:
    return seconds / count * 1e6


def _store_figures(
    name: str,
    key: str,
    steps: list[float],
    floor_label: str,
    floor: list[float],
    aim: report.Aim | None = None,
    note: str = "",
) -> list[report.Figure]:
    """A store's per-step and per-transition figures, both over one raw commit."""
    return [
        report.Figure(
            key=f"engine.{key}.step", group=GROUP, label=f"{name} step ({TRANSITIONS_PER_STEP} "
            "commits)", unit="us/step", samples=steps, floor_label=floor_label,
            floor_samples=floor, note=note,
        ),
        report.Figure(
            key=f"engine.{key}.transition", group=GROUP, label=f"{name} per transition",
            unit="us", samples=[s / TRANSITIONS_PER_STEP for s in steps],
            floor_label=floor_label, floor_samples=floor, aim=aim, note=note,
        ),
    ]  # fmt: skip


# ---------------------------------------------------------------- undo_core's own stores


def core_figures(args: argparse.Namespace) -> list[report.Figure]:
    steps = max(STEPS_PER_SAGA, args.steps // STEPS_PER_SAGA * STEPS_PER_SAGA)
    sq_steps = max(STEPS_PER_SAGA, args.sqlite_steps // STEPS_PER_SAGA * STEPS_PER_SAGA)
    bare, memory, lite, raw = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            bare.append(us_per(bare_calls(steps), steps))
            memory.append(saga_steps(MemoryStore, steps, args.budget))
            path = Path(tmp) / f"bench-{run}.sqlite3"
            lite.append(saga_steps(partial(SQLiteStore, path), sq_steps, args.budget))
            raw_path = Path(tmp) / f"raw-{run}.sqlite3"
            raw.append(us_per(raw_sqlite_commits(raw_path, sq_steps), sq_steps))
    memory_figure = report.Figure(
        key="engine.memory.step", group=GROUP, label="MemoryStore step", unit="us/step",
        samples=memory, floor_label="bare execute + undo calls", floor_samples=bare,
        aim=report.Aim("MemoryStore < 20 us/step", "value", "<=", 20.0),
        note=f"{steps:,} steps a run",
    )  # fmt: skip
    sqlite_figures = _store_figures(
        "SQLiteStore", "sqlite", lite, "raw sqlite3 single-row commit (WAL, synchronous=NORMAL)",
        raw, report.Aim("SQLiteStore within 3x of raw commits", "ratio", "<=", 3.0),
        f"{sq_steps:,} steps a run",
    )  # fmt: skip
    return [memory_figure, *sqlite_figures]


# ---------------------------------------------------------------- DjangoStore


@contextmanager
def django_on(db: str, workdir: Path) -> Iterator[str]:
    """Django set up on a migrated throw-away database of kind ``db``; yields its URL."""
    with temp_database(db, workdir) as url:
        manage(url, "migrate", "--no-input", "-v0")
        # DEBUG off: no query log growing with every commit, as in production.
        os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="sagaboard.config.settings",
                          SAGABOARD_DEBUG="0", SAGABOARD_TASKS_EAGER="1")  # fmt: skip
        import django

        django.setup()
        yield url


def raw_orm_transitions(project: Any, transitions: int) -> float:
    """Seconds for ``transitions`` ORM transactions writing a transition's rows, no logic.

    What a Django programmer would write by hand for one: in ``transaction.atomic()``,
    the saga row's UPDATE (which locks it), the step row's UPDATE, the event's INSERT.
    """
    from django.db import transaction
    from django.db.models import F
    from django.utils import timezone

    from sagaboard.models import Event, Step
    from sagaboard.models import Saga as SagaRow

    now = timezone.now()
    saga = SagaRow.objects.create(project=project, saga_id=f"raw-{now.timestamp()}", name="raw",
                                  status="IN_PROGRESS", created_at=now, updated_at=now)  # fmt: skip
    step = Step.objects.create(saga=saga, step_id="step-1", position=0, tool_name="bench",
                               state="PENDING", input=0)  # fmt: skip
    states = ("COMPLETED", "COMPENSATING", "ROLLED_BACK", "PENDING")
    started = time.perf_counter()
    for i in range(transitions):
        now = timezone.now()
        with transaction.atomic():
            SagaRow.objects.filter(pk=saga.pk).update(seq=F("seq") + 1, updated_at=now,
                                                      changed_at=now)  # fmt: skip
            Step.objects.filter(pk=step.pk).update(state=states[i % 4], updated_at=now,
                                                   changed_at=now)  # fmt: skip
            Event.objects.create(project=project, saga=saga, seq=i + 1, kind="step",
                                 client_event_id=f"{saga.saga_id}:{i + 1}", digest="",
                                 step_id="step-1", tool_name="bench", to_state=states[i % 4],
                                 at=now, change="{}")  # fmt: skip
    return time.perf_counter() - started


def transition_queries(make_store: Callable[[], Any]) -> tuple[float, int]:
    """SQL statements (BEGIN and COMMIT included) of one more saga's transitions, untimed:
    per step, and the most one transition took."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    store = make_store()
    most = 0
    apply = store.apply

    def counted(change: Any) -> None:
        nonlocal most
        with CaptureQueriesContext(connection) as one:
            apply(change)
        most = max(most, len(one.captured_queries))

    store.apply = counted
    with CaptureQueriesContext(connection) as ctx:
        saga_steps(lambda: store, STEPS_PER_SAGA, 60.0)
    return len(ctx.captured_queries) / STEPS_PER_SAGA, most


def django_figures(db: str, args: argparse.Namespace) -> list[report.Figure]:
    steps = max(STEPS_PER_SAGA, args.django_steps // STEPS_PER_SAGA * STEPS_PER_SAGA)
    transitions = steps * TRANSITIONS_PER_STEP
    with tempfile.TemporaryDirectory() as tmp, django_on(db, Path(tmp)) as url:
        from django.db import connection

        from sagaboard.engine.services.django_store import DjangoStore
        from sagaboard.models import Project

        project = Project.objects.create(slug="bench", name="Bench")
        store, floor, orm = [], [], []
        for run in range(args.runs):
            store.append(saga_steps(lambda: DjangoStore(project), steps, args.budget))
            orm.append(us_per(raw_orm_transitions(project, transitions), transitions))
            if db == "postgres":
                floor.append(us_per(raw_psycopg_commits(url, steps), steps))
            else:
                path = Path(connection.settings_dict["NAME"])
                floor.append(us_per(raw_sqlite_commits(path.with_name(f"raw-{run}.db"), steps),
                                    steps))  # fmt: skip
        queries, most = transition_queries(lambda: DjangoStore(project))
    floor_label = (
        "raw psycopg single-row commit" if db == "postgres"
        else "raw sqlite3 single-row commit (Django's pragmas)"
    )  # fmt: skip
    name = f"DjangoStore on {DJANGO_DBS[db]}"
    note = (
        f"{steps:,} steps a run; {queries:.1f} SQL queries a step (BEGIN and COMMIT "
        f"included), at most {most} a transition; a transition is one transaction: the "
        "saga row (a guarded UPDATE, which locks it), the step row, an event row"
    )
    return [
        *_store_figures(name, f"django_{db}", store, floor_label, floor, note=note),
        report.Figure(
            key=f"engine.django_{db}.transition_orm", group=GROUP,
            label=f"{name} per transition, over a raw ORM transaction", unit="us",
            samples=[s / TRANSITIONS_PER_STEP for s in store],
            floor_label="raw ORM transaction: saga UPDATE, step UPDATE, event INSERT in "
            "transaction.atomic()", floor_samples=orm,
            aim=report.Aim("DjangoStore per transition <= 3x a raw ORM transaction", "ratio",
                           "<=", 3),
            queries=most, note=f"{transitions:,} raw transactions a run; {note}",
        ),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = report.cli((__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, help="MemoryStore steps a run (20000; quick 2000)")
    parser.add_argument("--sqlite-steps", type=int, help="SQLiteStore steps a run (4000; 400)")
    parser.add_argument("--django-steps", type=int, help="DjangoStore steps a run (200; 50)")
    parser.add_argument("--budget", type=float, help="seconds a store may take a run (20; 5)")
    parser.add_argument(
        "--django",
        choices=[*DJANGO_DBS, "none"],
        action="append",
        help="DjangoStore on these databases (default: sqlite and postgres)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)  # fmt: skip
    args.steps = args.steps or (2_000 if args.quick else 20_000)
    args.sqlite_steps = args.sqlite_steps or (400 if args.quick else 4_000)
    args.django_steps = args.django_steps or (50 if args.quick else 200)
    args.budget = args.budget or (5.0 if args.quick else 20.0)
    dbs = [db for db in (args.django or list(DJANGO_DBS)) if db != "none"]
    if args.child:
        figures = django_figures(dbs[0], args)
    else:
        figures = core_figures(args)
        for db in dbs:
            child = ["--child", "--django", db, "--runs", str(args.runs), "--django-steps",
                     str(args.django_steps), "--budget", str(args.budget)]  # fmt: skip
            figures += figures_of("benchmarks.engine", child, timeout=300)
    report.emit(figures, args.json)


if __name__ == "__main__":
    main()

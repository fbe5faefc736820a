"""Per-step overhead of undo_core: ``python -m benchmarks.engine [--steps N] [--repeat R]``.

One "step" is the whole life a step has in a rolled-back saga: execute,
record (PENDING, COMPLETED), roll back (COMPENSATING, ROLLED_BACK). Figures
are medians over ``--repeat`` runs and are printed beside their floors, measured
in the same run: bare function calls (execute + undo) and raw sqlite3
single-row commits with the same pragmas as SQLiteStore.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from undo_core import MemoryStore, Saga, SagaStore, SQLiteStore, define_tool

STEPS_PER_SAGA = 10


def _execute(x: Any) -> Any:
    return x


def _undo(out: Any, x: Any) -> None:
    return None


TOOL = define_tool("bench", _execute, _undo)


def bare_calls(steps: int) -> float:
    started = time.perf_counter()
    for i in range(steps):
        _execute(i)
    for i in range(steps):
        _undo(i, i)
    return time.perf_counter() - started


def saga_steps(make_store: Callable[[], SagaStore], steps: int) -> float:
    store = make_store()
    started = time.perf_counter()
    for _ in range(steps // STEPS_PER_SAGA):
        saga = Saga("bench", store=store)
        for i in range(STEPS_PER_SAGA):
            saga.execute(TOOL, i)
        saga.rollback()
    elapsed = time.perf_counter() - started
    close = getattr(store, "close", None)
    if close is not None:
        close()
    return elapsed


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


def median_us(fn: Callable[[], float], count: int, repeat: int) -> tuple[float, float]:
    """Median and spread (max - min) of microseconds per unit over ``repeat`` runs."""
    samples = [fn() / count * 1e6 for _ in range(repeat)]
    return statistics.median(samples), max(samples) - min(samples)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="steps per run (default 20000)")
    parser.add_argument("--sqlite-steps", type=int, default=4_000, help="steps per SQLite run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (default 5)")
    args = parser.parse_args(argv)
    steps = max(STEPS_PER_SAGA, args.steps // STEPS_PER_SAGA * STEPS_PER_SAGA)
    sq_steps = max(STEPS_PER_SAGA, args.sqlite_steps // STEPS_PER_SAGA * STEPS_PER_SAGA)

    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(10**9))

        def sqlite_store() -> SagaStore:
            return SQLiteStore(Path(tmp) / f"bench-{next(counter)}.sqlite3")

        bare, bare_spread = median_us(lambda: bare_calls(steps), steps, args.repeat)
        memory, memory_spread = median_us(
            lambda: saga_steps(MemoryStore, steps), steps, args.repeat
        )
        lite, lite_spread = median_us(
            lambda: saga_steps(sqlite_store, sq_steps), sq_steps, args.repeat
        )
        raw, raw_spread = median_us(
            lambda: raw_sqlite_commits(Path(tmp) / f"raw-{next(counter)}.sqlite3", sq_steps),
            sq_steps,
            args.repeat,
        )

    per_commit = lite / 4  # PENDING, COMPLETED, COMPENSATING, ROLLED_BACK: one commit each
    rows = [
        ("bare execute+undo calls (floor)", bare, bare_spread, "1.0x"),
        ("MemoryStore step", memory, memory_spread, f"{memory / bare:,.0f}x bare"),
        ("raw sqlite3 single-row commit (floor)", raw, raw_spread, "1.0x"),
        ("SQLiteStore step (4 commits)", lite, lite_spread, f"{lite / raw:.2f}x raw commit"),
        ("SQLiteStore per transition", per_commit, lite_spread / 4, f"{per_commit / raw:.2f}x"),
    ]
    print(f"undo_core engine benchmark: median of {args.repeat} runs, microseconds per unit")
    print(f"{'figure':<40} {'median us':>10} {'spread':>9}  ratio")
    for label, value, spread, ratio in rows:
        print(f"{label:<40} {value:>10.2f} {spread:>9.2f}  {ratio}")
    print()
    verdict = "met" if memory < 20 else "MISSED"
    print(f"aim MemoryStore < 20 us/step: {memory:.2f} us -> {verdict}")
    print(
        f"aim SQLiteStore within 3x of raw commits: {per_commit / raw:.2f}x per transition, "
        f"{lite / raw:.2f}x per step (a step needs 4 durable transitions)"
    )


if __name__ == "__main__":
    main()

"""A process for the crash-recovery tests to kill: runs a saga on a SQLite file.

Usage: python crash_worker.py DB_PATH MODE MARKER_DIR

MODE:
  in_step        steps 1 and 2 complete, step 3's execute signals and blocks (step 3 PENDING)
  between_steps  steps 1 and 2 complete, then it signals and blocks before step 3
  in_undo        step 3 fails; step 2's undo completes, step 1's undo signals and blocks
  recover        signals, waits for MARKER_DIR/go, then recover()s every unfinished saga
                 and prints the ids it recovered as one JSON line

Every execute and undo appends one JSON line to MARKER_DIR/effects.log (with
the tool, the idempotency key, the attempt and this process's pid), so the
test can count how often each undo ran. To signal, the worker writes the
saga id to MARKER_DIR/ready-<pid> (atomically, by rename); the test then
sends SIGKILL.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from undo_core import ExecuteContext, Saga, SQLiteStore, Tool, UndoContext, define_tool, recover

BLOCK_SECONDS = 60.0  # far longer than any test waits: the test kills the process first


def log_effect(marker_dir: Path, **entry: Any) -> None:
    """Append one line with a single O_APPEND write, so concurrent writers never interleave."""
    line = json.dumps({**entry, "pid": os.getpid()}) + "\n"
    fd = os.open(marker_dir / "effects.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def signal_ready(marker_dir: Path, saga_id: str) -> None:
    tmp = marker_dir / f"ready-{os.getpid()}.tmp"
    tmp.write_text(saga_id)
    tmp.rename(marker_dir / f"ready-{os.getpid()}")


def make_tools(
    marker_dir: Path,
    *,
    block_in_execute: str | None = None,
    fail_in_execute: str | None = None,
    block_in_undo: str | None = None,
    undo_delay: float = 0.0,
) -> list[Tool]:
    def tool(name: str) -> Tool:
        def execute(input: Any, ctx: ExecuteContext) -> dict[str, Any]:
            log_effect(marker_dir, op="do", tool=name, key=ctx.idempotency_key)
            if name == fail_in_execute:
                raise RuntimeError(f"{name} failed")
            if name == block_in_execute:
                signal_ready(marker_dir, ctx.saga_id)
                time.sleep(BLOCK_SECONDS)
            return {"tool": name, "input": input}

        def undo(output: Any, input: Any, ctx: UndoContext) -> None:
            log_effect(
                marker_dir, op="undo", tool=name, key=ctx.idempotency_key, attempt=ctx.attempt
            )
            if name == block_in_undo:
                signal_ready(marker_dir, ctx.saga_id)
                time.sleep(BLOCK_SECONDS)
            if undo_delay:
                time.sleep(undo_delay)

        return define_tool(name, execute, undo)

    return [tool("t1"), tool("t2"), tool("t3")]


def run_saga(store: SQLiteStore, marker_dir: Path, mode: str) -> None:
    if mode == "in_step":
        t1, t2, t3 = make_tools(marker_dir, block_in_execute="t3")
    elif mode == "in_undo":
        t1, t2, t3 = make_tools(marker_dir, fail_in_execute="t3", block_in_undo="t1")
    else:
        t1, t2, t3 = make_tools(marker_dir)
    saga = Saga(f"crash-{mode}", store=store)
    saga.execute(t1, {"n": 1})
    saga.execute(t2, {"n": 2})
    if mode == "between_steps":
        signal_ready(marker_dir, saga.id)
        time.sleep(BLOCK_SECONDS)
    saga.execute(t3, {"n": 3})  # in_step blocks inside; in_undo fails and blocks in t1's undo
    raise SystemExit(f"mode {mode!r}: the saga went past its kill point")


def race_recover(store: SQLiteStore, marker_dir: Path) -> None:
    signal_ready(marker_dir, "-")
    deadline = time.monotonic() + 10
    while not (marker_dir / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit("never told to go")
        time.sleep(0.002)
    results = recover(store, make_tools(marker_dir, undo_delay=0.002))
    print(json.dumps([r.saga_id for r in results]), flush=True)


def main() -> None:
    db_path, mode, marker = sys.argv[1:4]
    marker_dir = Path(marker)
    with SQLiteStore(db_path) as store:
        if mode == "recover":
            race_recover(store, marker_dir)
        elif mode in ("in_step", "between_steps", "in_undo"):
            run_saga(store, marker_dir, mode)
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()

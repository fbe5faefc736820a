"""Crash recovery, agent-undo's third demo: a process is killed mid-saga, another one finishes it.

Process 1 runs StoreBot's return with its saga recorded in a SQLite file:
the item is marked returned and the refund issued, then, while the agent waits
for its model to pick the next tool, the demo kills it with SIGKILL (no
``finally``, no ``atexit``: as an OOM kill or a lost machine would). Process 2
opens the same file and calls :func:`~undo_core.recover`, which sees that the
saga's owner is dead, takes it over and rolls it back from where it stopped::

    python -m undo_core.demos.crash_recovery [--db PATH] [--url URL --token sgb_...]

Every execute and undo also appends a line to ``PATH.effects.jsonl`` (the
"outside world", shared by both processes), so the demo can show that each
undo ran exactly once. With ``--url`` the saga is mirrored to sagaboard through
a spool file: the events process 1 queued before it died are sent by process 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import (
    ExecuteContext,
    Saga,
    SagaStore,
    SQLiteStore,
    Tool,
    UndoContext,
    define_tool,
    recover,
)
from ._support import Tee, add_remote_args, check_remote_args, dashboard_url, remote_store, say

KILL_POINT = "waiting for the model to choose the next tool"
"""Process 1 prints this, then blocks: the parent kills it when it reads the line."""
BLOCK_SECONDS = 60.0  # far longer than the parent ever waits to kill it


def ledger_path(db: Path) -> Path:
    return db.with_name(db.name + ".effects.jsonl")


def record_effect(db: Path, **entry: Any) -> None:
    """Append one line in a single O_APPEND write: two processes never interleave lines."""
    line = json.dumps({**entry, "pid": os.getpid()}) + "\n"
    fd = os.open(ledger_path(db), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def make_tools(db: Path) -> list[Tool]:
    """StoreBot's tools, defined the same way in both processes (recover() needs them by name)."""

    def mark_returned(inp: dict[str, Any], ctx: ExecuteContext) -> dict[str, Any]:
        record_effect(db, op="do", tool="return_item", saga=ctx.saga_id)
        say(f"    DB: item #{inp['itemId']} marked as returned")
        return {"itemId": inp["itemId"], "status": "returned"}

    def mark_active(output: Any, inp: dict[str, Any], ctx: UndoContext) -> None:
        record_effect(db, op="undo", tool="return_item", saga=ctx.saga_id, key=ctx.idempotency_key)
        say(f"    undo return_item: item #{inp['itemId']} is active again")

    def issue_refund(inp: dict[str, Any], ctx: ExecuteContext) -> dict[str, Any]:
        record_effect(db, op="do", tool="refund_payment", saga=ctx.saga_id)
        say(f"    Stripe: ${inp['amount'] / 100:.2f} refund re_1 issued")
        return {"id": "re_1", "amount": inp["amount"]}

    def cancel_refund(refund: dict[str, Any], inp: Any, ctx: UndoContext) -> None:
        record_effect(
            db, op="undo", tool="refund_payment", saga=ctx.saga_id, key=ctx.idempotency_key
        )
        say(f"    undo refund_payment: refund {refund['id']} cancelled")

    return [
        define_tool("return_item", mark_returned, mark_active),
        define_tool("refund_payment", issue_refund, cancel_refund),
    ]


@contextmanager
def open_store(args: argparse.Namespace) -> Iterator[SagaStore]:
    """The SQLite file (what recovery reads), teed to sagaboard when ``--url`` is given.

    The mirror spools to disk so the events of a process that is killed are
    not lost with it: the next process on the same spool sends them first.
    """
    db = Path(args.db)
    spool = db.with_name(db.name + ".sagaboard-spool")
    with SQLiteStore(db) as local, remote_store(args.url, args.token, spool=spool) as mirror:
        yield local if mirror is None else Tee(local, mirror)


def agent(args: argparse.Namespace) -> None:
    """Process 1: two steps, then block where the parent kills it."""
    db = Path(args.db)
    say(f"[process 1, pid {os.getpid()}] StoreBot return, saga recorded in {db}")
    with open_store(args) as store:
        return_item, refund_payment = make_tools(db)
        saga = Saga("storebot-return", saga_id=args.saga_id, store=store)
        say("Step 1: Mark item #882 as returned in database")
        saga.execute(return_item, {"itemId": "882"})
        say("Step 2: Issue $40 refund via Stripe")
        saga.execute(refund_payment, {"chargeId": "ch_123", "amount": 4000})
        say(f"    ... {KILL_POINT}")
        time.sleep(BLOCK_SECONDS)
    raise SystemExit("process 1 was never killed")


def recoverer(args: argparse.Namespace) -> None:
    """Process 2: recover every saga a dead process left in the file, and say what was undone."""
    db = Path(args.db)
    say(f"[process 2, pid {os.getpid()}] recover(SQLiteStore({str(db)!r}), tools)")
    with open_store(args) as store:
        results = recover(store, make_tools(db))
        for result in results:
            snapshot = store.load(result.saga_id)
            tools = {s.id: s.tool_name for s in snapshot.steps} if snapshot else {}
            undone = ", ".join(f"{i} ({tools.get(i)})" for i in result.report.rolled_back)
            say(f"    recovered saga {result.saga_id} ({result.saga_name}): {result.status}")
            say(f"    rolled back (newest first): {undone or 'nothing'}")
            if result.in_doubt:
                say(f"    in doubt, for a human: {', '.join(result.in_doubt)}")
        again = recover(store, make_tools(db))
        say(f"    a second recover() finds {len(again)} saga(s) to recover: nothing runs twice")


def count_undos(db: Path, saga_id: str) -> Counter[str]:
    """How many times each tool's undo ran for ``saga_id``, from the shared ledger."""
    counts: Counter[str] = Counter()
    for line in ledger_path(db).read_text().splitlines():
        entry = json.loads(line)
        if entry["saga"] == saga_id and entry["op"] == "undo":
            counts[entry["tool"]] += 1
    return counts


def child(args: argparse.Namespace, role: str, saga_id: str) -> list[str]:
    """The command line of a child process; the token travels in its environment, not argv."""
    command = [sys.executable, "-m", "undo_core.demos.crash_recovery"]
    command += ["--role", role, "--db", str(args.db), "--saga-id", saga_id]
    return command + (["--url", args.url] if args.url else [])


def demo(args: argparse.Namespace) -> int:
    """The parent: start process 1, kill it mid-saga, run process 2, then check the ledger."""
    db = Path(args.db)
    saga_id = args.saga_id
    env = {**os.environ, **({"SAGABOARD_TOKEN": args.token} if args.token else {})}
    say(f"Crash recovery demo: the saga lives in {db}")
    say()
    first = subprocess.Popen(
        child(args, "agent", saga_id), stdout=subprocess.PIPE, text=True, env=env
    )
    assert first.stdout is not None
    killed = False
    for line in first.stdout:
        say(line.rstrip("\n"))
        if KILL_POINT in line:
            first.kill()  # SIGKILL: the process gets no chance to clean up
            killed = True
            break
    code = first.wait(timeout=30)
    if not killed:
        say(f"process 1 ended on its own (exit {code}) before the kill point")
        return 1
    say(f"[demo] SIGKILL sent to pid {first.pid} mid-saga (exit {code}): steps 1-2 done, no step 3")
    say("[demo] its memory is gone; the SQLite file still has the saga IN_PROGRESS")
    say()
    second = subprocess.run(child(args, "recover", saga_id), env=env, timeout=120, check=False)
    if second.returncode != 0:
        say(f"process 2 failed (exit {second.returncode})")
        return 1
    say()
    undos = count_undos(db, saga_id)
    say(
        "[demo] undos in the ledger: "
        + ", ".join(f"{tool} x{undos[tool]}" for tool in ("refund_payment", "return_item"))
    )
    if undos == Counter({"refund_payment": 1, "return_item": 1}):
        say("[demo] the killed process's side-effects were rolled back, each undo exactly once.")
    else:
        say("[demo] unexpected: an undo is missing or ran twice")
        return 1
    if args.url:
        say(f"On the dashboard: {dashboard_url(args.url, args.token, saga_id)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m undo_core.demos.crash_recovery", description=__doc__
    )
    parser.add_argument("--db", help="the SQLite file (default: a new one in a temp folder)")
    add_remote_args(parser)
    parser.add_argument("--role", choices=["demo", "agent", "recover"], default="demo",
                        help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--saga-id", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    check_remote_args(parser, args)
    if args.db is None:
        args.db = str(Path(tempfile.mkdtemp(prefix="undo-core-crash-")) / "agent-sagas.sqlite3")
    args.saga_id = args.saga_id or f"crash-demo-{uuid.uuid4().hex[:12]}"
    if args.role == "agent":
        agent(args)
    elif args.role == "recover":
        recoverer(args)
    else:
        return demo(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

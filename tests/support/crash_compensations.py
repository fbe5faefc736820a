"""The worker-crash test's server-side undo (listed in SAGABOARD_COMPENSATION_MODULES).

Every call appends a JSON line to ``$SAGABOARD_CRASH_DIR/calls.jsonl`` (pid, step,
idempotency key, attempt, time) when it starts and when it ends. The very first call
writes ``running`` and then waits (at most two minutes) for a ``release`` file: the
test kills the worker while it waits there, in the middle of the undo.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from sagaboard.engine.services.undo_kinds import compensation
from tests.support import call_log
from undo_core import UndoContext


def _dir() -> Path:
    return Path(os.environ["SAGABOARD_CRASH_DIR"])


def _record(event: str, ctx: UndoContext) -> None:
    call_log.append(_dir() / "calls.jsonl", event, ctx)


@compensation("crashtest.undo")
def crash_undo(input: Any, output: Any, ctx: UndoContext) -> str:
    calls = _dir() / "calls.jsonl"
    first = not calls.exists() or not calls.read_text().strip()
    _record("enter", ctx)
    if first:
        (_dir() / "running").write_text(str(os.getpid()))
        deadline = time.monotonic() + 120
        while not (_dir() / "release").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the crash test never released the first undo")
            time.sleep(0.05)
    _record("exit", ctx)
    return f"undone {output} (idempotency key {ctx.idempotency_key})"

"""The seam of tests/faults/test_worker_claim_crash.py: a worker killed after it claimed an
approved undo and before the undo's own code starts.

Loaded by the worker through ``CELERY_IMPORTS`` (``tests.support.claim_crash_settings``).
``sagaboard.engine.services.undo_kinds.run`` is what the runner's undo calls once the worker holds
the task and the saga's lease, the engine has written the step COMPENSATING and the
approval that stands has been checked: the last moment before the undo's own code. Here:

* every call of ``run`` appends a "claimed" line (pid, step, idempotency key, attempt) to
  ``$SAGABOARD_CLAIM_DIR/calls.jsonl``; with ``SAGABOARD_CLAIM_KILL=1``, the first call in
  that folder (whichever worker makes it) then SIGKILLs its own process, as the kernel's
  OOM killer would, before the undo is entered;
* every registered handler (the undo's own code) appends an "entered" line when it starts.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from pathlib import Path
from typing import Any

from sagaboard.engine.services import undo_kinds
from tests.support import call_log
from undo_core import UndoContext


def _dir() -> Path:
    return Path(os.environ["SAGABOARD_CLAIM_DIR"])


def _log(event: str, ctx: UndoContext) -> None:
    call_log.append(_dir() / "calls.jsonl", event, ctx)


def _first_kill() -> bool:
    """True exactly once per folder: the marker is created exclusively."""
    try:
        fd = os.open(_dir() / "killed", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def _entered(fn: Any) -> Any:
    @functools.wraps(fn)
    def handler(input: Any, output: Any, ctx: UndoContext, **args: Any) -> Any:
        _log("entered", ctx)
        return fn(input, output, ctx, **args)

    handler.claim_seam = True  # type: ignore[attr-defined]
    return handler


_run = undo_kinds.run


def run(saga: Any, step: Any, ctx: UndoContext, *, approved_hash: str | None = None) -> str:
    _log("claimed", ctx)
    if os.environ.get("SAGABOARD_CLAIM_KILL") == "1" and _first_kill():
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)  # the signal is delivered before this returns; never reached
    registered = undo_kinds.handlers()
    for name, fn in list(registered.items()):
        if not getattr(fn, "claim_seam", False):
            registered[name] = _entered(fn)
    return _run(saga, step, ctx, approved_hash=approved_hash)


undo_kinds.run = run

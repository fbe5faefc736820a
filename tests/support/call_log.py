"""The worker-crash tests' call log: one JSON line per undo event, appended atomically
(``O_APPEND``), so lines from a killed worker and its successor never interleave."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from undo_core import UndoContext


def append(path: Path, event: str, ctx: UndoContext) -> None:
    """Add ``event`` for ``ctx``'s step (pid, idempotency key, attempt, time) to ``path``."""
    line = json.dumps({
        "event": event, "pid": os.getpid(), "step": ctx.step_id,
        "key": ctx.idempotency_key, "attempt": ctx.attempt, "t": time.time(),
    })  # fmt: skip
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)

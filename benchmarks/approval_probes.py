"""The approval benchmark's probes inside the Celery worker (``benchmarks.approval``).

Imported by the worker at start (``CELERY_IMPORTS`` in ``benchmarks.approval_settings``)
and listed in ``SAGABOARD_COMPENSATION_MODULES``. Each probe appends one JSON line,
with the wall clock (``time.time()``, the same clock the browser's
``performance.timeOrigin + performance.now()`` reads on this machine), to the file
``$SAGABOARD_BENCH_PROBES``:

* ``undo``: the first thing the approved undo (handler ``bench.approved_undo``) does;
* ``noop``: the first thing the floor's no-op task does;
* ``prerun`` / ``postrun``: Celery's task signals, so the benchmark knows when the
  worker is idle again (and when the rollback task started, for the breakdown).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from celery import shared_task
from celery.signals import task_postrun, task_prerun

from sagaboard.engine.services.undo_kinds import compensation
from undo_core import UndoContext


def probe(event: str, **fields: Any) -> None:
    """One line, one write(2) on an O_APPEND file: never torn, never mixed with another."""
    line = json.dumps({"e": event, "t": time.time(), **fields}) + "\n"
    fd = os.open(os.environ["SAGABOARD_BENCH_PROBES"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@compensation("bench.approved_undo")
def approved_undo(input: Any, output: Any, ctx: UndoContext) -> str:
    probe("undo", saga=ctx.saga_id)
    return "undone"


@shared_task(name="bench.noop")
def noop(tag: str) -> None:
    probe("noop", tag=tag)


@task_prerun.connect
def _prerun(task: Any = None, args: Any = None, **kwargs: Any) -> None:
    probe("prerun", task=getattr(task, "name", ""), args=list(args or []))


@task_postrun.connect
def _postrun(task: Any = None, args: Any = None, **kwargs: Any) -> None:
    probe("postrun", task=getattr(task, "name", ""), args=list(args or []))

"""The topology test's server-side undos (listed in SAGABOARD_COMPENSATION_MODULES).

``topology.return_item`` and ``topology.refund_payment`` run the demo's registered
handlers (``storebot.return_item`` / ``storebot.refund_payment``, from
``sagaboard.demo.compensations``) and log every call around them: one JSON line in
``$SAGABOARD_TOPOLOGY_DIR/calls.jsonl`` when the call starts (``enter``) and one when
the handler has returned (``exit``), with the worker's pid, the saga, the step and
the idempotency key. An ``exit`` line is a successful run.

A worker started with ``SAGABOARD_TOPOLOGY_HOLD_AT=N`` stops in its N-th call (after
its ``enter`` line): it writes ``held.json`` and waits (at most two minutes) for a
``release`` file. The test SIGKILLs that worker while it waits there, so the kill
lands in the middle of an undo, deterministically.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from sagaboard.demo.compensations import cancel_refund, cancel_return
from sagaboard.engine.services.undo_kinds import compensation
from undo_core import UndoContext

_calls_here = 0


def _dir() -> Path:
    return Path(os.environ["SAGABOARD_TOPOLOGY_DIR"])


def _record(event: str, handler: str, ctx: UndoContext) -> None:
    line = json.dumps({
        "event": event, "handler": handler, "pid": os.getpid(), "saga": ctx.saga_id,
        "step": ctx.step_id, "key": ctx.idempotency_key, "attempt": ctx.attempt,
        "t": time.time(),
    })  # fmt: skip
    # One write(2) of one short line on an O_APPEND file: lines of several workers never mix.
    fd = os.open(_dir() / "calls.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _hold_if_asked(ctx: UndoContext) -> None:
    global _calls_here
    _calls_here += 1
    if _calls_here != int(os.environ.get("SAGABOARD_TOPOLOGY_HOLD_AT") or 0):
        return
    held = {"pid": os.getpid(), "saga": ctx.saga_id, "step": ctx.step_id,
            "key": ctx.idempotency_key}  # fmt: skip
    (_dir() / "held.tmp").write_text(json.dumps(held))
    (_dir() / "held.tmp").rename(_dir() / "held.json")  # seen whole or not at all
    deadline = time.monotonic() + 120
    while not (_dir() / "release").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the topology test never killed (or released) this worker")
        time.sleep(0.02)


def _logged(handler: str, run: Any, input: Any, output: Any, ctx: UndoContext, **args: Any) -> Any:
    _record("enter", handler, ctx)
    _hold_if_asked(ctx)
    result = run(input, output, ctx, **args)
    _record("exit", handler, ctx)
    return result


@compensation("topology.return_item")
def return_item(input: Any, output: Any, ctx: UndoContext, **args: Any) -> Any:
    return _logged("topology.return_item", cancel_return, input, output, ctx, **args)


@compensation("topology.refund_payment")
def refund_payment(input: Any, output: Any, ctx: UndoContext, **args: Any) -> Any:
    return _logged("topology.refund_payment", cancel_refund, input, output, ctx, **args)

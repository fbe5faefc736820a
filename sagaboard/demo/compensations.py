"""Server-side undos for the demo's StoreBot sagas (listed in SAGABOARD_COMPENSATION_MODULES).

Real deployments list their own modules; these only print what a real undo
would do, and ``fail_first`` makes an undo fail on its first attempts, so the
demo (and the end-to-end test) can show a retry from the dashboard. What they answer
names the step's output as JSON (``json.dumps``), never as a Python repr: it is what the
event log and the audit trail show (``undo.output``).
"""

from __future__ import annotations

import json
from typing import Any

from sagaboard.engine.services.undo_kinds import compensation
from undo_core import UndoContext


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _maybe_fail(ctx: UndoContext, fail_first: int, what: str) -> None:
    if ctx.attempt <= fail_first:
        raise ConnectionError(f"{what}: upstream timed out (attempt {ctx.attempt})")


@compensation("storebot.refund_payment")
def cancel_refund(input: Any, output: Any, ctx: UndoContext, fail_first: int = 0) -> str:
    if ctx.attempt <= fail_first:
        raise ConnectionError(f"Stripe API timed out reversing the refund (attempt {ctx.attempt})")
    return f"refund {_json(output)} reversed (idempotency key {ctx.idempotency_key})"


@compensation("storebot.return_item")
def cancel_return(input: Any, output: Any, ctx: UndoContext, fail_first: int = 0) -> str:
    _maybe_fail(ctx, fail_first, "warehouse return cancellation")
    return f"return {_json(output)} cancelled (idempotency key {ctx.idempotency_key})"


@compensation("checkout.release_stock")
def release_stock(input: Any, output: Any, ctx: UndoContext) -> str:
    return f"stock {_json(input)} released (idempotency key {ctx.idempotency_key})"

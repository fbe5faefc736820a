"""Undos that sagaboard runs itself: registered handlers, signed webhooks, shell commands.

A step posted through the API says how its undo runs (``Step.undo``):

- ``{"kind": "handler", "handler": "name", "args": {...}}``: a Python function
  registered with ``@compensation("name")`` in a module listed in
  ``SAGABOARD_COMPENSATION_MODULES``; called as ``fn(input, output, ctx, **args)``.
- ``{"kind": "webhook", "url": "https://..."}``: a POST of the step's input and
  output, signed with HMAC-SHA256 (``X-Sagaboard-Signature: sha256=<hex>``
  over the body with ``SAGABOARD_WEBHOOK_SECRET``); any 2xx is success.
- ``{"kind": "command", "command": "..."}``: off unless
  ``SAGABOARD_ALLOW_COMMAND_UNDOS``; split with ``shlex`` and run without a
  shell, with a timeout; always needs approval (it is text an agent sent).

``plan_for`` says exactly what will run; an approval binds to its hash, so a
changed URL, argument or command voids the approval.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import json
import shlex
import subprocess
from collections.abc import Callable
from typing import Any

import httpx
from django.conf import settings

from sagaboard.models import Saga, Step
from undo_core import UndoContext

Handler = Callable[..., Any]
_HANDLERS: dict[str, Handler] = {}
_loaded = False


class UndoKindError(RuntimeError):
    """The undo could not run as specified (unknown handler, commands disabled...)."""


def compensation(name: str) -> Callable[[Handler], Handler]:
    """Register ``fn`` as the server-side undo called ``name``."""

    def register(fn: Handler) -> Handler:
        if name in _HANDLERS and _HANDLERS[name] is not fn:
            raise ValueError(f"compensation {name!r} is registered twice")
        _HANDLERS[name] = fn
        return fn

    return register


def handlers() -> dict[str, Handler]:
    """Every registered handler, after importing the modules the settings list."""
    global _loaded
    if not _loaded:
        for module in settings.SAGABOARD_COMPENSATION_MODULES:
            importlib.import_module(module)
        _loaded = True
    return _HANDLERS


def webhook_body(saga: Saga, step: Step) -> dict[str, Any]:
    return {
        "saga_id": saga.saga_id,
        "step_id": step.step_id,
        "tool_name": step.tool_name,
        "idempotency_key": step.idempotency_key,
        "input": step.input,
        "output": step.output,
    }


def plan_for(saga: Saga, step: Step) -> dict[str, Any]:
    """Exactly what this step's undo will run, as an approver must see it."""
    spec = step.undo or {}
    kind = spec.get("kind", "none")
    if kind == "handler":
        return {
            "kind": "handler",
            "handler": spec.get("handler"),
            "args": spec.get("args") or {},
            "input": step.input,
            "output": step.output,
        }
    if kind == "webhook":
        return {"kind": "webhook", "url": spec.get("url"), "body": webhook_body(saga, step)}
    if kind == "command":
        return {"kind": "command", "command": spec.get("command")}
    if kind == "client":
        return {
            "kind": "client",
            "tool": step.tool_name,
            "input": step.input,
            "output": step.output,
        }
    return {"kind": "none"}


def plan_hash(plan: dict[str, Any]) -> str:
    raw = json.dumps(plan, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def run(saga: Saga, step: Step, ctx: UndoContext) -> str:
    """Run the step's undo once; raise on failure. Returns what it printed or answered."""
    plan = plan_for(saga, step)
    kind = plan["kind"]
    if kind == "handler":
        fn = handlers().get(plan["handler"] or "")
        if fn is None:
            raise UndoKindError(
                f"no compensation {plan['handler']!r} is registered "
                f"(SAGABOARD_COMPENSATION_MODULES={settings.SAGABOARD_COMPENSATION_MODULES})"
            )
        result = fn(step.input, step.output, ctx, **plan["args"])
        return "" if result is None else str(result)[:10_000]
    if kind == "webhook":
        return _post_webhook(plan["url"], plan["body"], ctx)
    if kind == "command":
        return _run_command(plan["command"])
    raise UndoKindError(f"a {kind!r} undo does not run in sagaboard")


def _post_webhook(url: str, body: dict[str, Any], ctx: UndoContext) -> str:
    raw = json.dumps(body, ensure_ascii=False).encode()
    headers = {
        "content-type": "application/json",
        "idempotency-key": ctx.idempotency_key,
        "x-sagaboard-signature": sign(raw, settings.SAGABOARD_WEBHOOK_SECRET),
        "x-sagaboard-attempt": str(ctx.attempt),
    }
    response = httpx.post(
        url, content=raw, headers=headers, timeout=settings.SAGABOARD_UNDO_TIMEOUT_SECONDS
    )
    if response.status_code // 100 != 2:
        raise UndoKindError(f"webhook answered {response.status_code}: {response.text[:500]}")
    return f"HTTP {response.status_code} {response.text[:2000]}"


def _run_command(command: str) -> str:
    if not settings.SAGABOARD_ALLOW_COMMAND_UNDOS:
        raise UndoKindError("command undos are off (set SAGABOARD_ALLOW_COMMAND_UNDOS=1)")
    argv = shlex.split(command)
    if not argv:
        raise UndoKindError("the command is empty")
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=settings.SAGABOARD_UNDO_TIMEOUT_SECONDS,
            check=False,
        )
    except FileNotFoundError as err:
        raise UndoKindError(f"command not found: {argv[0]}") from err
    output = (done.stdout + done.stderr)[-10_000:]
    if done.returncode != 0:
        raise UndoKindError(f"command exited with {done.returncode}: {output[-2000:]}")
    return output

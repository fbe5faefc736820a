"""Undos that sagaboard runs itself: registered handlers, signed webhooks, shell commands.

A step posted through the API says how its undo runs (``Step.undo``):

- ``{"kind": "handler", "handler": "name", "args": {...}}``: a Python function
  registered with ``@compensation("name")`` in a module listed in
  ``SAGABOARD_COMPENSATION_MODULES``; called as ``fn(input, output, ctx, **args)``.
- ``{"kind": "webhook", "url": "https://..."}``: a POST of the step's input and
  output, signed with HMAC-SHA256 (``X-Sagaboard-Signature: sha256=<hex>``
  over the body with ``SAGABOARD_WEBHOOK_SECRET``); any 2xx is success.
- ``{"kind": "command", "command": "..."}``: off unless
  ``SAGABOARD_ALLOW_COMMAND_UNDOS``; always needs approval (it is text an agent
  sent). Split with ``shlex`` and run without a shell (``; rm -rf /`` stays
  three arguments), in a fixed directory (``SAGABOARD_COMMAND_UNDO_CWD``), with
  an environment of ``PATH`` and ``LANG`` only (nothing of the worker's: no
  database URL, secret key or tokens), in its own process group killed whole on
  timeout, its output read to a cap and the rest discarded.

``plan_for`` says exactly what will run (for a command: the arguments, directory
and environment); an approval binds to its hash, so a changed URL, argument or
command voids the approval, and ``run`` refuses a plan whose hash is not the
approved one.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import shlex
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.utils import timezone

from sagaboard.infra.signatures import sign
from sagaboard.models import Saga, Step
from undo_core import UndoContext, UndoKind, local_owner_dead

Handler = Callable[..., Any]
_HANDLERS: dict[str, Handler] = {}
_loaded = False


# What a command undo gets as its environment: nothing else from the worker's.
COMMAND_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
# The most output kept from a command (bytes); the rest is read and discarded.
OUTPUT_CAP = 64 * 1024


class UndoKindError(RuntimeError):
    """The undo could not run as specified (unknown handler, commands disabled...)."""


class PlanChanged(UndoKindError):
    """What is about to run is not what was approved: it does not run."""


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


@dataclass(frozen=True, slots=True)
class UndoCheck:
    """Whether (and why not) an undo can run for a saga here: one answer for every asker.

    The runner refuses what cannot run with this ``why`` before trying; the
    compensation plan and the approval queue show it before anyone approves; the
    manual-flow API refuses such a step when it is added (``field`` names what to fix).
    """

    can_run: bool
    why: str = ""
    field: str | None = None
    code: str = "cannot_run_here"

    def __bool__(self) -> bool:
        return self.can_run


_OK = UndoCheck(True)


def undo_check(driver: str, undo: Mapping[str, Any] | None) -> UndoCheck:
    """Can the undo described by ``undo`` (a step's ``Step.undo``) run for a saga of ``driver``?

    ``none`` has nothing to run. ``client`` runs in the agent, so only for a saga the agent
    runs. ``handler`` needs a registered handler, ``webhook`` an http(s) URL, ``command``
    a command that splits into arguments and ``SAGABOARD_ALLOW_COMMAND_UNDOS``.
    """
    spec = undo or {}
    kind = spec.get("kind", "none")
    if kind == "none":
        return _OK
    if kind == "client":
        if driver == Saga.Driver.CLIENT:
            return _OK
        return UndoCheck(
            False,
            "a 'client' undo runs in the agent's own process, but sagaboard runs this saga "
            "and nothing here can run it: give it a 'handler', 'webhook' or 'command' undo",
            "undo.kind",
        )
    if driver == Saga.Driver.CLIENT:
        return UndoCheck(False, f"a saga its agent runs has only 'client' undos, not {kind!r}",
                         "undo.kind")  # fmt: skip
    if kind == "handler":
        name = spec.get("handler") or ""
        if not name:
            return UndoCheck(False, "a 'handler' undo needs the handler's name", "undo.handler")
        if name not in handlers():
            return UndoCheck(
                False,
                f"no compensation {name!r} is registered "
                f"(SAGABOARD_COMPENSATION_MODULES={settings.SAGABOARD_COMPENSATION_MODULES})",
                "undo.handler",
            )
        return _OK
    if kind == "webhook":
        url = urlsplit(spec.get("url") or "")
        if url.scheme not in ("http", "https") or not url.hostname:
            return UndoCheck(False, "a 'webhook' undo needs an http:// or https:// URL",
                             "undo.url")  # fmt: skip
        return _OK
    if kind == "command":
        try:
            command_argv(spec.get("command"))
        except UndoKindError as err:  # what no setting changes: a bad request
            return UndoCheck(False, f"undo.command: {err}", "undo.command", "validation_error")
        if not settings.SAGABOARD_ALLOW_COMMAND_UNDOS:
            return UndoCheck(
                False,
                "command undos are off on this server (SAGABOARD_ALLOW_COMMAND_UNDOS=0)",
                "undo.kind",
            )
        return _OK
    return UndoCheck(False, f"no undo of kind {kind!r} exists", "undo.kind")


SAGABOARD_KINDS = frozenset({UndoKind.HANDLER, UndoKind.WEBHOOK, UndoKind.COMMAND})
"""The undo kinds sagaboard's workers run themselves."""


class UndoRunner(StrEnum):
    """Who runs a step's undo: the one vocabulary of the plan, the worker and every action."""

    NOTHING = "nothing"
    """The step has no undo (``has_undo`` false): skipped during rollback, as agent-undo does."""
    SAGABOARD = "sagaboard"
    """A handler, webhook or command: a worker runs it (when ``undo_check`` allows)."""
    AGENT = "agent"
    """The undo lives in the agent's process (kind ``client``, or a stored ``none`` whose step
    has an undo: read the safe way). A worker never attempts it."""


def undo_runner(has_undo: bool, undo: Mapping[str, Any] | None) -> UndoRunner:
    """Which of the three cases a step is, from its record alone.

    Records stored before the three were told apart hold ``{}`` (read as ``none``) for an
    undo that ran in the engine's process: a step that has an undo but names no kind that
    sagaboard runs is the agent's, never "nothing to undo" and never done.
    """
    if not has_undo:
        return UndoRunner.NOTHING
    if (undo or {}).get("kind") in SAGABOARD_KINDS:
        return UndoRunner.SAGABOARD
    return UndoRunner.AGENT


def agent_holds(saga: Saga, now: datetime) -> bool:
    """The agent (not a worker) holds the saga's lease now, and is not known to be dead."""
    owner = saga.lease_owner
    if not owner or owner.endswith(":worker") or saga.lease_expires_at is None:
        return False
    return saga.lease_expires_at > now and not local_owner_dead(owner)


AGENT_GONE = (
    "not run: the undo of {tool!r} lives in the agent's process, and no agent holds this "
    "saga now, so nothing here can run it. Undo it by hand and force-resolve the step, "
    "or leave it failed"
)
"""The reason a worker records, in words, for an agent's undo it cannot reach."""


@dataclass(frozen=True, slots=True)
class UndoRoute:
    """Who runs a step's undo and what a rollback then does: derived once (``undo_route``)
    and read by the compensation plan, the worker, stop, retry, force-resolve, leave,
    batch jobs, the API, the MCP tools and the dashboard, so none can promise what
    another does not do."""

    runner: UndoRunner
    check: UndoCheck
    """Whether it can run by the way ``runner`` says (a worker's check, or the agent's hold)."""
    agent_here: bool = False
    """``runner`` is the agent and an agent can run it now (it holds the saga, or runs it)."""

    @property
    def waits_for_operator(self) -> bool:
        """Nothing can run it: an operator decides (force-resolve or leave), never a retry."""
        return not self.check

    def words(self, tool: str) -> str:
        """What the plan says of it, before anyone acts."""
        if self.runner is UndoRunner.NOTHING:
            return "nothing to undo: no undo declared, the side effect stays"
        if self.runner is UndoRunner.AGENT:
            if self.agent_here:
                return "runs in the agent: its own process undoes it"
            return "waits for an operator: " + AGENT_GONE.format(tool=tool).removeprefix(
                "not run: "
            )
        return f"cannot run here: {self.check.why}" if not self.check else "runs in sagaboard"


def undo_route(saga: Saga, step: Step, now: datetime | None = None) -> UndoRoute:
    """The one answer to "who runs this undo, and what happens then" for ``step`` of ``saga``.

    An agent-run saga (``driver = client``) rolls back in its agent: every undo it has is
    the agent's. A saga sagaboard runs has the agent's undos only when the engine that ran
    it stored them so; while that process still holds the saga, a stop reaches it there;
    once it is gone, the step waits for an operator.
    """
    runner = undo_runner(step.has_undo, step.undo)
    if runner is UndoRunner.NOTHING:
        return UndoRoute(runner, _OK)
    if runner is UndoRunner.SAGABOARD:
        return UndoRoute(runner, undo_check(saga.driver, step.undo))
    if saga.driver == Saga.Driver.CLIENT:
        return UndoRoute(runner, _OK, agent_here=True)
    here = agent_holds(saga, now or timezone.now())
    if here:
        return UndoRoute(runner, _OK, agent_here=True)
    why = AGENT_GONE.format(tool=step.tool_name).removeprefix("not run: ")
    return UndoRoute(runner, UndoCheck(False, why, "undo.kind"))


def retry_refused(saga: Saga, step: Step, now: datetime | None = None) -> str:
    """Why a retry of this failed undo is not offered ('' when it is): nothing here can run
    it, so it could only fail again (what ``operator_actions.step_act`` refuses a retry by;
    the pages ask ``operator_actions.retry_refused``, which adds an approver's rejection)."""
    if not step.needs_operator:
        return ""
    if step.retry_waits_for_approval:  # resolve and leave are offered beside this
        by = (step.pending_action or {}).get("by", "an operator")
        return f"a retry asked by {by} waits for approval ({step.retry_waits_for_approval})"
    route = undo_route(saga, step, now)
    return route.check.why if route.waits_for_operator else ""


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
        return command_plan(spec.get("command"))
    if kind == "client":
        return {
            "kind": "client",
            "tool": step.tool_name,
            "input": step.input,
            "output": step.output,
        }
    return {"kind": "none"}


def command_argv(command: str | None) -> list[str]:
    """The arguments a command undo runs (``shlex``, no shell); UndoKindError says why not."""
    if not command or not command.strip():
        raise UndoKindError("the command is empty")
    if "\x00" in command:
        raise UndoKindError("the command contains a NUL character")
    try:
        return shlex.split(command)
    except ValueError as err:  # an unclosed quote
        raise UndoKindError(f"the command cannot be split into arguments: {err}") from err


def command_plan(command: str | None) -> dict[str, Any]:
    """Everything that decides what a command undo does, as the approver sees it."""
    plan: dict[str, Any] = {
        "kind": "command",
        "command": command,
        "argv": [],
        "cwd": str(settings.SAGABOARD_COMMAND_UNDO_CWD),
        "env": dict(COMMAND_ENV),
    }
    try:
        plan["argv"] = command_argv(command)
    except UndoKindError as err:
        plan["error"] = str(err)
    return plan


def plan_hash(plan: dict[str, Any]) -> str:
    raw = json.dumps(plan, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


def run(saga: Saga, step: Step, ctx: UndoContext, *, approved_hash: str | None = None) -> str:
    """Run the step's undo once; raise on failure. Returns what it printed or answered.

    ``approved_hash``: the plan hash a person approved. The plan is computed once,
    hashed, compared, and that same plan is what runs: nothing can change between.
    """
    plan = plan_for(saga, step)
    if approved_hash is not None and plan_hash(plan) != approved_hash:
        raise PlanChanged(
            f"refused: what would run (plan {plan_hash(plan)[:12]}) is not what was approved "
            f"(plan {approved_hash[:12]}); it needs a new approval"
        )
    check = undo_check(saga.driver, step.undo)
    if not check:
        raise UndoKindError(f"cannot run here: {check.why}")
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
        return _run_command(plan)
    raise UndoKindError(AGENT_GONE.format(tool=step.tool_name))


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


def _run_command(plan: dict[str, Any]) -> str:
    if not settings.SAGABOARD_ALLOW_COMMAND_UNDOS:
        raise UndoKindError("command undos are off (set SAGABOARD_ALLOW_COMMAND_UNDOS=1)")
    if plan.get("error"):
        raise UndoKindError(plan["error"])
    argv, cwd, timeout = plan["argv"], Path(plan["cwd"]), settings.SAGABOARD_UNDO_TIMEOUT_SECONDS
    cwd.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=plan["env"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, to kill whole
        )
    except FileNotFoundError as err:
        raise UndoKindError(f"command not found: {argv[0]} (PATH={plan['env']['PATH']})") from err
    except OSError as err:
        raise UndoKindError(f"the command cannot start: {err}") from err
    assert process.stdout is not None
    output = _CappedOutput(process.stdout, OUTPUT_CAP)
    try:
        code: int | None = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        # Whatever it left running goes too (and a child holding the pipe open would
        # otherwise keep the reader waiting).
        _kill_group(process.pid)
        process.wait()
    text = output.finish()
    if code is None:
        raise UndoKindError(
            f"command timed out after {timeout:g} s (killed with its process group); "
            f"output so far: {text[-2000:]}"
        )
    if code != 0:
        raise UndoKindError(f"command exited with {code}: {text[-2000:]}")
    return text


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # nothing left in it
        os.killpg(pgid, signal.SIGKILL)


class _CappedOutput:
    """Reads a pipe to its end in a thread, keeping the first ``cap`` bytes only.

    Memory stays bounded whatever the command prints (``yes`` for a minute); the
    pipe is drained, so the command never blocks on a full pipe.
    """

    def __init__(self, stream: IO[bytes], cap: int) -> None:
        self.kept, self.dropped, self.cap = bytearray(), 0, cap
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        with stream:
            while chunk := os.read(stream.fileno(), 65536):
                room = self.cap - len(self.kept)
                self.kept += chunk[:room] if room > 0 else b""
                self.dropped += max(0, len(chunk) - max(room, 0))

    def finish(self) -> str:
        self._thread.join(timeout=5)
        text = self.kept.decode("utf-8", "replace")
        if self.dropped:
            text += f"\n[output truncated: {self.dropped} more bytes not kept]"
        return text

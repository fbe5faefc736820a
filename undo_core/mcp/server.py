"""``undo-mcp``: the seed's MCP server (agent-undo-mcp) on the official ``mcp`` SDK, over stdio.

Seven tools with the seed's names and arguments (``saga_begin``, ``saga_add_step``,
``saga_complete_step``, ``saga_fail_step``, ``saga_rollback``, ``saga_status``,
``saga_list_steps``). Every answer is a text a model reads plus the same facts
as structured content; a call that cannot be carried out is a tool error
(``isError``) with a message saying what to fix, and the server keeps serving.

Standalone (default)::

    undo-mcp --db ~/.undo-mcp/sagas.sqlite3 --timeout 60

keeps the sagas in a SQLite file (they survive a restart) and, on
``saga_rollback``, runs each completed step's ``undoCommand`` newest first
through ``/bin/sh -c`` in the server's working directory (or ``--cwd``), as the
seed does, each killed after ``--timeout`` seconds. Before it runs any, it asks the person in
the chat to confirm the exact commands (MCP elicitation, ``--confirm-undos``, see
``confirm.py``); a decline, cancel or no answer runs nothing, and neither does a client that
cannot ask (it gets the commands listed). Unlike the seed, which runs the agent's commands at
once, none runs unconfirmed unless undo-mcp is started with ``--confirm-undos run-unconfirmed``.

Connected::

    SAGABOARD_TOKEN=sgb_... undo-mcp --url https://sagaboard.example

drives sagaboard's manual-flow API instead: ``undoCommand`` becomes a command
undo, which always waits for an approver in the dashboard before a worker runs it
(without a shell); a server with command undos off refuses the step, and the
tool error says why. The tools' descriptions say what connected mode does.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.types import CallToolResult
except ImportError as err:  # pragma: no cover - mcp missing, or the 1.x API (FastMCP)
    raise ImportError(
        f"undo-mcp needs the mcp SDK's MCPServer (mcp 2.x): pip install 'undo-core[mcp]' ({err})",
        name="mcp",
    ) from err

from .backends import Backend, LocalBackend, RemoteBackend, Reply, ToolInputError
from .confirm import (
    CONFIRM_UNDOS,
    DEFAULT_CONFIRM_TIMEOUT,
    DEFAULT_CONFIRM_UNDOS,
    DEPRECATED_CONFIRM_UNDOS,
    UndoGate,
    add_rollback_tool,
)

__all__ = ["DEFAULT_DB", "build_server", "main"]

DEFAULT_DB = Path("~/.undo-mcp/sagas.sqlite3")
log = logging.getLogger("undo_core.mcp")

_INSTRUCTIONS = """\
Track a multi-step task as a saga so its side effects can be undone if it fails.
Call saga_begin, then for every side-effecting action: saga_add_step (with an
undoCommand, a shell command that reverses it) before running it, and
saga_complete_step or saga_fail_step after. If the task cannot finish, call
saga_rollback: {gate}.
Tools that take sagaId use the last saga begun in this session when it is omitted."""

_GATE_INSTRUCTIONS = {  # what saga_rollback does with the undo commands, per --confirm-undos
    "elicit": "the undo commands of the completed steps run newest first, once the person "
    "confirms them in the chat (if this client cannot ask, nothing runs and the result lists "
    "them)",
    "always-refuse": "this server never runs the undo commands; it lists them, newest first, "
    "for a person to run by hand",
    "run-unconfirmed": "the undo commands of the completed steps run newest first, at once, "
    "without anyone confirming them (--confirm-undos run-unconfirmed)",
}


def _result(reply: Reply) -> CallToolResult:
    return CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": reply.text}],
            "structuredContent": reply.data,
            "isError": False,
        }
    )


def _error(tool: str, message: str) -> CallToolResult:
    return CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": f"{tool} failed: {message}"}],
            "structuredContent": {"error": message, "tool": tool},
            "isError": True,
        }
    )


def _call(tool: str, action: Callable[[], Reply]) -> CallToolResult:
    try:
        return _result(action())
    except ToolInputError as err:
        return _error(tool, str(err))
    except Exception as err:  # a tool must answer, never take the server down
        log.exception("%s failed", tool)
        return _error(tool, f"{type(err).__name__}: {err}")


_CONNECTED_INSTRUCTIONS = """\
Track a multi-step task as a saga on sagaboard so its side effects can be undone if it fails.
Call saga_begin, then for every side-effecting action: saga_add_step (with an undoCommand
that reverses it) before running it, and saga_complete_step or saga_fail_step after. If the
task cannot finish, call saga_rollback: it only asks sagaboard to roll back. Nothing is undone
at once: every undo command waits for a person to approve it in the dashboard, then a
sagaboard worker runs it (without a shell). Follow it with saga_status.
Tools that take sagaId use the last saga begun in this session when it is omitted."""

# What each tool does in connected mode (``--url``), where sagaboard, not this process, runs
# the undos: the descriptions a model reads must say so.
_CONNECTED = {
    "saga_begin": "Start a saga on sagaboard (run by sagaboard, shown in its dashboard). "
    "Returns its sagaId.",
    "saga_add_step": "Register a step (PENDING) on sagaboard with the command that undoes it; "
    "returns its stepId. Call it before running the side-effecting action. The undoCommand "
    "becomes a sagaboard command undo: it runs only after a person approves it in the "
    "dashboard, in a sagaboard worker, split into arguments and run WITHOUT a shell (no "
    "pipes, ';' or redirections), in the server's fixed directory. A server with command "
    "undos switched off (SAGABOARD_ALLOW_COMMAND_UNDOS) refuses the step with an error "
    "saying so: then nothing could undo it, so decide before running the action. Without "
    "undoCommand the step is tracked but nothing undoes it.",
    "saga_complete_step": "Mark a registered step as completed (its undo will be asked for "
    "if the saga is rolled back).",
    "saga_fail_step": "Mark a step as failed. The saga stays open: call saga_rollback to undo.",
    "saga_rollback": "Ask sagaboard to roll the saga back. Returns at once with the saga "
    "COMPENSATING: nothing has been undone yet. Each completed step's undo command waits for "
    "an approver in the dashboard, then a sagaboard worker runs it, newest step first. An "
    "approver may reject an undo (its side effects remain): call saga_status to follow it.",
    "saga_status": "Get the saga's status on sagaboard (including whether a rollback was "
    "clean or had exceptions, and whether it waits for a person) and where each step stands.",
    "saga_list_steps": "Full detail on every step (input, output, error, undo command, "
    "decisions, timestamps).",
}


_STANDALONE_ADD_STEP = (
    "Register a step (PENDING) with the shell command that undoes it; returns its stepId. "
    "Call it before running the side-effecting action. Without undoCommand the step is "
    "tracked but nothing undoes it."
)


def build_server(
    backend: Backend,
    *,
    confirm_undos: str = DEFAULT_CONFIRM_UNDOS,
    confirm_timeout: float = DEFAULT_CONFIRM_TIMEOUT,
) -> MCPServer[Any]:
    """The MCP server with the seven saga tools, bound to ``backend``.

    The tools' descriptions follow the backend's mode: in connected mode the undos run in
    sagaboard after an approval, not here, and the descriptions say so. In standalone mode
    ``confirm_undos`` says whether ``saga_rollback`` asks the person in the chat before it
    runs undo commands (``undo_core.mcp.confirm``: by default it runs none that no person
    confirmed), and the descriptions say what it chose; connected mode ignores it.
    """
    connected = backend.mode == "connected"
    gate = None
    if isinstance(backend, LocalBackend):  # undo commands run here: ask the person first
        gate = UndoGate(backend, confirm_undos, timeout=confirm_timeout)
    instructions = (
        _CONNECTED_INSTRUCTIONS
        if gate is None
        else _INSTRUCTIONS.format(gate=_GATE_INSTRUCTIONS[gate.mode])
    )
    server: MCPServer[Any] = MCPServer("undo-mcp", instructions=instructions)

    def about(name: str) -> str | None:
        return _CONNECTED[name] if connected else None  # None: the function's docstring

    _add_step_tools(server, backend, about, gate)
    if gate is not None:
        add_rollback_tool(server, gate, _call)
    else:  # connected: sagaboard's approval queue decides, never this chat

        @server.tool(description=about("saga_rollback"))
        def saga_rollback(sagaId: str | None = None) -> CallToolResult:
            """Run the undo command of every completed step, in reverse order."""
            return _call("saga_rollback", lambda: backend.rollback(sagaId))

    _add_read_tools(server, backend, about)
    return server


def _add_step_tools(
    server: MCPServer[Any],
    backend: Backend,
    about: Callable[[str], str | None],
    gate: UndoGate | None,
) -> None:
    """Add the tools that write a saga step by step: begin, add, complete and fail a step."""

    def add_step_about() -> str | None:
        if gate is None:
            return about("saga_add_step")
        return _STANDALONE_ADD_STEP + gate.step_note()

    @server.tool(description=about("saga_begin"))
    def saga_begin(name: str | None = None) -> CallToolResult:
        """Start a new saga transaction. Returns its sagaId."""
        return _call("saga_begin", lambda: backend.begin(name))

    @server.tool(description=add_step_about())
    def saga_add_step(
        toolName: str,
        sagaId: str | None = None,
        input: Any = None,
        undoCommand: str | None = None,
    ) -> CallToolResult:
        """Register a step (PENDING) with the shell command that undoes it; returns its stepId.

        Call it before running the side-effecting action. Without undoCommand the
        step is tracked but nothing undoes it.
        """
        return _call(
            "saga_add_step", lambda: backend.add_step(sagaId, toolName, input, undoCommand)
        )

    @server.tool(description=about("saga_complete_step"))
    def saga_complete_step(
        stepId: str, sagaId: str | None = None, output: Any = None
    ) -> CallToolResult:
        """Mark a registered step as completed (its undo runs if the saga is rolled back)."""
        return _call("saga_complete_step", lambda: backend.complete_step(sagaId, stepId, output))

    @server.tool(description=about("saga_fail_step"))
    def saga_fail_step(stepId: str, error: str, sagaId: str | None = None) -> CallToolResult:
        """Mark a step as failed. The saga stays open: call saga_rollback to undo."""
        return _call("saga_fail_step", lambda: backend.fail_step(sagaId, stepId, error))


def _add_read_tools(
    server: MCPServer[Any], backend: Backend, about: Callable[[str], str | None]
) -> None:
    """Add the tools that read a saga: its status, and every step in full."""

    @server.tool(description=about("saga_status"))
    def saga_status(sagaId: str | None = None) -> CallToolResult:
        """Get the saga's status and a summary of its steps."""
        return _call("saga_status", lambda: backend.status(sagaId))

    @server.tool(description=about("saga_list_steps"))
    def saga_list_steps(sagaId: str | None = None) -> CallToolResult:
        """Full detail on every step (input, output, error, undo command, timestamps)."""
        return _call("saga_list_steps", lambda: backend.list_steps(sagaId))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="undo-mcp",
        description="MCP server (stdio) that tracks an agent's steps as sagas and undoes them. "
        "Unlike agent-undo's MCP server (agent-undo-mcp), whose saga_rollback runs every "
        "agent-supplied undoCommand at once, undo-mcp never runs an undo command that no "
        "person confirmed, unless started with --confirm-undos run-unconfirmed: by default it "
        "asks in the chat (MCP elicitation), and a client that cannot ask gets the commands "
        "listed and nothing undone.",
    )
    p.add_argument(
        "--db",
        type=Path,
        default=Path(os.environ.get("UNDO_MCP_DB") or DEFAULT_DB),
        help="standalone mode: the SQLite file of the sagas (default %(default)s, or $UNDO_MCP_DB)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="standalone mode: seconds each undo command may run (default %(default)s)",
    )
    p.add_argument(
        "--cwd",
        default=None,
        help="standalone mode: working directory of the undo commands (default: the server's)",
    )
    p.add_argument(
        "--confirm-undos",
        choices=(*CONFIRM_UNDOS, *DEPRECATED_CONFIRM_UNDOS),
        metavar="{" + ",".join(CONFIRM_UNDOS) + "}",
        default=os.environ.get("UNDO_MCP_CONFIRM_UNDOS") or DEFAULT_CONFIRM_UNDOS,
        help="standalone mode: what saga_rollback does with the undo commands (shell command "
        "lines an agent wrote). "
        "'elicit' asks the person in the chat (MCP elicitation) to confirm the exact commands "
        "and runs them only on a yes; a decline, cancel or no answer runs nothing, and so does "
        "a client without elicitation, which cannot ask: it gets the commands listed and "
        "'nothing was undone'. "
        "'always-refuse' never runs undo commands (the result lists them for a person to run "
        "by hand). "
        "'run-unconfirmed' runs them at once without asking anyone, as agent-undo's MCP server "
        "does: agent-written shell commands then run unreviewed with this server's rights. "
        "'never' is a deprecated spelling that now means always-refuse. "
        "Default %(default)s (or $UNDO_MCP_CONFIRM_UNDOS). Connected mode ignores it: "
        "sagaboard's approval queue decides there",
    )
    p.add_argument(
        "--confirm-timeout",
        type=float,
        default=DEFAULT_CONFIRM_TIMEOUT,
        help="standalone mode, --confirm-undos elicit: seconds the person has to answer; "
        "no answer runs nothing (default %(default)s)",
    )
    p.add_argument(
        "--url",
        default=os.environ.get("SAGABOARD_URL") or None,
        help="connected mode: sagaboard's base URL (or $SAGABOARD_URL); "
        "the token comes from $SAGABOARD_TOKEN",
    )
    return p


def make_backend(args: argparse.Namespace) -> Backend:
    if args.url:
        token = os.environ.get("SAGABOARD_TOKEN", "").strip()
        if not token:
            raise SystemExit("undo-mcp: --url needs the project's API token in $SAGABOARD_TOKEN")
        return RemoteBackend(args.url, token)
    if args.timeout <= 0:
        raise SystemExit("undo-mcp: --timeout must be > 0 seconds")
    return LocalBackend(args.db, timeout=args.timeout, cwd=args.cwd)


def main(argv: Sequence[str] | None = None) -> None:
    """Console script ``undo-mcp``: serve the saga tools over stdio until stdin closes."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # stdout is the MCP stream
    accepted = (*CONFIRM_UNDOS, *DEPRECATED_CONFIRM_UNDOS)
    if args.confirm_undos not in accepted:  # argparse does not check an env default
        raise SystemExit(
            f"undo-mcp: --confirm-undos (or $UNDO_MCP_CONFIRM_UNDOS) must be one of "
            f"{', '.join(CONFIRM_UNDOS)}, got {args.confirm_undos!r}"
        )
    if args.confirm_timeout <= 0:
        raise SystemExit("undo-mcp: --confirm-timeout must be > 0 seconds")
    backend = make_backend(args)
    try:
        build_server(
            backend, confirm_undos=args.confirm_undos, confirm_timeout=args.confirm_timeout
        ).run("stdio")
    finally:
        backend.close()


if __name__ == "__main__":
    main()

"""Ask the person in the chat before ``undo-mcp`` runs undo commands (MCP elicitation).

In standalone mode an undo command is a shell command line an agent wrote, run with the
server's rights: the person should see it (the exact command, the directory, the step it
undoes) and say yes before it runs. The MCP client shows the question (elicitation, a flat
form: a ``confirm`` box and an optional ``reason``); only an accepted, confirmed answer runs
the rollback. A decline, a cancel, no answer within the timeout, a client that fails to ask or
a client that cannot ask at all runs nothing, and the tool result says so and lists the
commands. ``--confirm-undos`` chooses (:data:`CONFIRM_UNDOS`):

``elicit`` (the default)
    ask when the client declares the ``elicitation`` capability; a client that declares none
    cannot ask, so nothing runs: the result lists the commands and how a person can have them
    run (by hand, a client that can ask, connected mode's approval queue, or the flag below).
``always-refuse``
    never run an undo command; the result lists them and where to run them by hand.
``run-unconfirmed``
    never ask: run the agent's commands at once, as agent-undo's MCP server does. The opt-in
    for a setup that accepts agent-written shell commands running unreviewed; its name says so.

``never`` (the spelling of "never ask" before ``run-unconfirmed``) is a deprecated alias that
now refuses like ``always-refuse`` (:data:`DEPRECATED_CONFIRM_UNDOS`): its name does not say
that commands run unreviewed, and a configuration written for the old behaviour must not keep
running them silently; whoever wants that spells ``run-unconfirmed``.

The question is a ``Resolve`` parameter of ``saga_rollback`` (the SDK's resolver form): it
works on both protocol eras, as a mid-call ``elicitation/create`` request (up to 2025-11-25,
where this module asks itself, under the timeout) and as an ``InputRequiredResult`` the client
answers by retrying (2026-07-28, where ``ctx.elicit()`` would fail).

No ``from __future__ import annotations`` here: the SDK finds the ``Resolve(...)`` marker with
``typing.get_type_hints``, which cannot evaluate a string naming a closure's variable.
"""

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

import anyio
import anyio.to_thread
from mcp.server.elicitation import (
    AcceptedElicitation,
    CancelledElicitation,
    DeclinedElicitation,
)
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from .backends import LocalBackend, Reply, UndoPlan

__all__ = [
    "CONFIRM_UNDOS",
    "DEFAULT_CONFIRM_TIMEOUT",
    "DEFAULT_CONFIRM_UNDOS",
    "DEPRECATED_CONFIRM_UNDOS",
    "ConfirmUndos",
    "UndoConfirmation",
    "UndoGate",
    "Verdict",
    "add_rollback_tool",
    "confirmation_message",
]

log = logging.getLogger("undo_core.mcp")

ConfirmUndos = Literal["elicit", "always-refuse", "run-unconfirmed"]
CONFIRM_UNDOS: tuple[ConfirmUndos, ...] = get_args(ConfirmUndos)
DEFAULT_CONFIRM_UNDOS: ConfirmUndos = "elicit"
DEPRECATED_CONFIRM_UNDOS: dict[str, ConfirmUndos] = {"never": "always-refuse"}
"""Old spellings still accepted, and the mode each now means (never one that runs unasked)."""
DEFAULT_CONFIRM_TIMEOUT = 300.0
"""Seconds the person has to answer (mid-call protocol); then nothing runs."""

_INPUT_REQUIRED_PROTOCOL = "2026-07-28"  # from here, elicitation rides InputRequiredResult

Answer = AcceptedElicitation[Any] | DeclinedElicitation | CancelledElicitation
"""What the resolver hands ``saga_rollback``: the person's answer, or a :class:`Verdict`
(as the ``data`` of an accepted outcome) when nobody had to be asked."""


class UndoConfirmation(BaseModel):
    """The form the person fills in: flat and primitive, as the spec requires; nothing secret."""

    confirm: bool = Field(
        title="Run these undo commands now",
        description="Tick to run the undo commands shown, newest first; leave it unticked, "
        "decline or cancel and nothing runs.",
    )
    reason: str | None = Field(
        default=None,
        title="Reason (optional)",
        description="Why: passed back to the agent in the tool result.",
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether ``saga_rollback`` may run its undo commands, and why (said in the result).

    ``why``: ``nothing-to-confirm`` (no command would run), ``unconfirmed`` (``--confirm-undos
    run-unconfirmed``: ran, nobody asked), ``no-elicitation`` (the client cannot ask, so
    nothing runs), ``accepted``, ``declined``, ``cancelled``, ``timeout``, ``unsupported`` (the
    client declared elicitation but answered "not supported"), ``failed`` (the question could
    not be asked) or ``refused`` (``--confirm-undos always-refuse``, or the deprecated
    ``never``).
    """

    run: bool
    why: str
    plan: UndoPlan | None = None
    reason: str | None = None
    detail: str | None = None


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _commands(plan: UndoPlan) -> str:
    lines = []
    for n, undo in enumerate(plan.undos, 1):
        what = f"{undo.step_id} ({undo.tool_name}"
        what += f", input {_short(undo.input)})" if undo.input is not None else ")"
        lines.append(f"{n}. {what}:\n   {undo.command}")
    return "\n".join(lines)


def confirmation_message(plan: UndoPlan) -> str:
    """The question shown in the chat: the exact commands, their directory, what each undoes."""
    text = (
        f'Roll back saga "{plan.name}" ({plan.saga_id})? This runs {len(plan.undos)} undo '
        f"command(s), newest first, each through /bin/sh -c in {plan.cwd}, with the MCP "
        f"server's rights:\n{_commands(plan)}"
    )
    if plan.kept:
        kept = ", ".join(f"{k.step_id} ({k.tool_name})" for k in plan.kept)
        text += f"\nCompleted steps without an undo command keep their side effects: {kept}."
    return text + "\nConfirm to run them; decline or cancel and nothing runs."


def _can_elicit(ctx: Context[Any, Any]) -> bool:
    """The client declared form elicitation (a bare ``elicitation: {}`` means form)."""
    caps = ctx.client_capabilities
    if caps is None:
        params = ctx.session.client_params
        caps = params.capabilities if params is not None else None
    found = caps.elicitation if caps is not None else None
    return found is not None and (found.form is not None or found.url is None)


_RUN_UNCONFIRMED_RISK = (
    "undo-mcp runs every undo command at once, without asking anyone to confirm it "
    "(--confirm-undos run-unconfirmed): each is a shell command line an agent wrote, run "
    "through /bin/sh -c with the server's rights"
)


class UndoGate:
    """Decides, per ``saga_rollback`` call, whether standalone mode may run the undo commands.

    ``mode`` is one of :data:`CONFIRM_UNDOS` or a deprecated spelling
    (:data:`DEPRECATED_CONFIRM_UNDOS`); ``self.mode`` is the mode it means, ``self.requested``
    what was asked for.
    """

    def __init__(
        self,
        backend: LocalBackend,
        mode: str = DEFAULT_CONFIRM_UNDOS,
        *,
        timeout: float = DEFAULT_CONFIRM_TIMEOUT,
    ) -> None:
        if mode in DEPRECATED_CONFIRM_UNDOS:
            effective = DEPRECATED_CONFIRM_UNDOS[mode]
            log.warning(
                "--confirm-undos %s is deprecated and now means %s (no undo command runs); "
                "to run undo commands nobody confirmed, use --confirm-undos run-unconfirmed",
                mode,
                effective,
            )
        elif mode in CONFIRM_UNDOS:
            effective = next(m for m in CONFIRM_UNDOS if m == mode)
        else:
            raise ValueError(f"confirm_undos must be one of {', '.join(CONFIRM_UNDOS)}: {mode!r}")
        if timeout <= 0:
            raise ValueError("the confirmation timeout must be > 0 seconds")
        if effective == "run-unconfirmed":
            log.warning("%s", _RUN_UNCONFIRMED_RISK)
        self.backend = backend
        self.mode: ConfirmUndos = effective
        self.requested = mode
        self.timeout = timeout

    async def ask(
        self, sagaId: str | None, ctx: Context[Any, Any]
    ) -> Elicit[UndoConfirmation] | Verdict:
        """The resolver of ``saga_rollback``: a :class:`Verdict`, or the question to ask.

        It may run once per round of a retried call (2026-07-28): it only reads the saga.
        """
        try:
            plan = await anyio.to_thread.run_sync(self.backend.undo_plan, sagaId)
        except Exception:  # a bad sagaId: the rollback itself answers the tool error
            return Verdict(True, "nothing-to-confirm")
        if not plan.undos:
            return Verdict(True, "nothing-to-confirm", plan)
        if self.mode == "run-unconfirmed":
            return Verdict(True, "unconfirmed", plan)
        if self.mode == "always-refuse":
            return Verdict(False, "refused", plan)
        if not _can_elicit(ctx):  # nobody can be asked, so nobody confirms: nothing runs
            return Verdict(False, "no-elicitation", plan)
        message = confirmation_message(plan)
        if (ctx.protocol_version or "") >= _INPUT_REQUIRED_PROTOCOL:
            # The SDK returns an InputRequiredResult and the client retries with the answer;
            # no answer means no retry, so nothing runs.
            return Elicit(message, UndoConfirmation)
        try:
            with anyio.fail_after(self.timeout):
                answer = await ctx.elicit(message, UndoConfirmation)
        except TimeoutError:
            return Verdict(False, "timeout", plan)
        except MCPError as err:  # the client answered the request with an error
            why = "unsupported" if "not supported" in str(err).lower() else "failed"
            return Verdict(False, why, plan, detail=str(err))
        except Exception as err:  # no back channel, a malformed answer...: never a yes
            log.warning("asking to confirm the undo commands failed", exc_info=True)
            return Verdict(False, "failed", plan, detail=f"{type(err).__name__}: {err}")
        return self.verdict(answer, plan)

    def verdict(self, answer: Answer, plan: UndoPlan | None = None) -> Verdict:
        """The person's answer (or the resolver's own verdict) as a :class:`Verdict`."""
        if isinstance(answer, DeclinedElicitation):
            return Verdict(False, "declined", plan)
        if isinstance(answer, CancelledElicitation):
            return Verdict(False, "cancelled", plan)
        data = answer.data
        if isinstance(data, Verdict):
            return data
        if isinstance(data, UndoConfirmation):
            reason = (data.reason or "").strip() or None
            return Verdict(data.confirm, "accepted" if data.confirm else "declined", plan, reason)
        return Verdict(False, "failed", plan, detail=f"unexpected answer {data!r}")

    def carry_out(self, verdict: Verdict, saga_id: str | None) -> Reply:
        """Run the rollback if the verdict allows it; else say, in words, why nothing ran."""
        plan = verdict.plan
        if verdict.run:
            if verdict.why == "accepted":
                approved = plan or self.backend.undo_plan(saga_id)
                reply = self.backend.rollback(saga_id, approved=approved)
            else:
                reply = self.backend.rollback(saga_id)
            text = reply.text  # today's text, word for word, unless the person was asked
            if verdict.why == "accepted":
                why = f" ({verdict.reason})" if verdict.reason else ""
                text = f"The person confirmed the undo commands in the chat{why}. {text}"
            return Reply(text, {**reply.data, "confirmation": self._data(verdict)})
        plan = plan or self.backend.undo_plan(saga_id)
        status = self.backend.status(saga_id)
        return Reply(
            f"Nothing was undone: {self._why_not(verdict)} The saga and its steps stay as they "
            f"were ({status.data['status']}); the side effects of its completed steps remain. "
            f"{self._next(plan, verdict)}",
            {
                **status.data,
                "rolledBack": [],
                "undoCommands": [
                    {"stepId": u.step_id, "toolName": u.tool_name, "command": u.command}
                    for u in plan.undos
                ],
                "cwd": plan.cwd,
                "confirmation": self._data(verdict),
            },
        )

    def _why_not(self, verdict: Verdict) -> str:
        reason = f' ("{verdict.reason}")' if verdict.reason else ""
        return {
            "declined": f"the person declined the undo commands in the chat{reason}.",
            "cancelled": "the person dismissed the question without answering.",
            "timeout": f"the person did not answer within {self.timeout:g}s.",
            "unsupported": "the MCP client could not show the question "
            f"({verdict.detail}), so nobody confirmed the undo commands.",
            "failed": f"the question could not be asked ({verdict.detail}), so nobody "
            "confirmed the undo commands.",
            "no-elicitation": "this MCP client cannot ask the person to confirm the undo "
            "commands (it declares no elicitation capability), and undo-mcp never runs an undo "
            "command that no person confirmed.",
            "refused": self._refused(),
        }.get(verdict.why, f"not confirmed ({verdict.why}).")

    def _refused(self) -> str:
        if self.requested != self.mode:  # a deprecated spelling
            return (
                f"this undo-mcp never runs undo commands (--confirm-undos {self.requested}, a "
                f"deprecated spelling that now means {self.mode}; running them unconfirmed is "
                "--confirm-undos run-unconfirmed)."
            )
        return "this undo-mcp never runs undo commands (--confirm-undos always-refuse)."

    def _next(self, plan: UndoPlan, verdict: Verdict) -> str:
        listed = f"The undo commands, newest first, in {plan.cwd}:\n{_commands(plan)}"
        if verdict.why == "refused":
            return (
                "To undo, a person runs them in a terminal, in that directory, newest first "
                "(or restarts undo-mcp with --confirm-undos elicit to be asked in the chat). "
                + listed
            )
        if verdict.why == "no-elicitation":
            return (
                "Show the person these commands. To have them undone, a person can: run them "
                "in a terminal, in that directory, newest first; use an MCP client that supports "
                "elicitation (saga_rollback then asks in the chat); connect undo-mcp to sagaboard "
                "(--url), where each undo command waits for a person's approval in the approval "
                "queue; or, accepting that agent-written shell commands then run unreviewed with "
                "the server's rights, restart undo-mcp with --confirm-undos run-unconfirmed. "
                + listed
            )
        return "Ask the person what to do; saga_rollback asks again. " + listed

    def _data(self, verdict: Verdict) -> dict[str, Any]:
        asked = verdict.why in ("accepted", "declined", "cancelled", "timeout", "unsupported")
        data: dict[str, Any] = {
            "mode": self.mode,
            "asked": asked,
            "answer": verdict.why,
            "ran": verdict.run,
            "reason": verdict.reason,
        }
        if self.requested != self.mode:
            data["deprecatedMode"] = self.requested
        if verdict.why == "no-elicitation":
            data["note"] = (
                "nothing ran: this MCP client cannot ask the person (no elicitation "
                "capability), and nobody confirmed the undo commands; a person runs them by "
                "hand, or uses a client that can ask, or connected mode (--url, the approval "
                "queue), or restarts undo-mcp with --confirm-undos run-unconfirmed to run "
                "unconfirmed commands"
            )
        elif verdict.why == "unconfirmed":
            data["note"] = "ran without anyone confirming: " + _RUN_UNCONFIRMED_RISK
        return data

    def description(self) -> str:
        """``saga_rollback``'s description: the model must know what the mode does."""
        head = "Run the undo command of every completed step, in reverse order (newest first)."
        said = {
            "elicit": " Before any command runs, the person is asked in the chat to confirm the "
            "exact commands; if they decline, cancel or do not answer, nothing runs and the "
            "result says so. If this MCP client cannot ask (no elicitation support), nothing "
            "runs: the result lists the commands and how a person can have them run. No undo "
            "command runs unless a person confirmed it (--confirm-undos elicit).",
            "always-refuse": " This server never runs undo commands ("
            + self._flag()
            + "): the result lists them and where a person can run them.",
            "run-unconfirmed": " WARNING: " + _RUN_UNCONFIRMED_RISK + ". Nobody is asked.",
        }
        return head + said[self.mode]

    def step_note(self) -> str:
        """What ``saga_add_step``'s description adds: what becomes of the undo command."""
        return {
            "elicit": " On saga_rollback the command runs only after the person confirms it in "
            "the chat; an MCP client that cannot ask gets it listed, and it does not run.",
            "always-refuse": " This server never runs it (" + self._flag() + "): on "
            "saga_rollback it is listed for a person to run by hand.",
            "run-unconfirmed": " WARNING: on saga_rollback it runs through /bin/sh -c with "
            "the server's rights, without anyone confirming it (--confirm-undos "
            "run-unconfirmed).",
        }[self.mode]

    def _flag(self) -> str:
        if self.requested != self.mode:
            return f"--confirm-undos {self.requested}, deprecated: now {self.mode}"
        return f"--confirm-undos {self.mode}"


def add_rollback_tool(
    server: MCPServer[Any],
    gate: UndoGate,
    call: Callable[[str, Callable[[], Reply]], CallToolResult],
) -> None:
    """Register standalone ``saga_rollback``: the gate's question, then the rollback or not.

    ``call`` is the server's wrapper that turns a :class:`Reply` or a ``ToolInputError``
    into the tool result, so this tool answers like the six others.
    """

    @server.tool(name="saga_rollback", description=gate.description())
    async def saga_rollback(
        answer: Annotated[Answer, Resolve(gate.ask)], sagaId: str | None = None
    ) -> CallToolResult:
        verdict = gate.verdict(answer)
        return await anyio.to_thread.run_sync(
            lambda: call("saga_rollback", lambda: gate.carry_out(verdict, sagaId))
        )

"""What the seven MCP tools do, in the two modes, without any MCP in it.

``LocalBackend`` (standalone) runs the sagas with undo_core in a SQLite file and
runs each step's ``undoCommand`` itself on rollback; ``RemoteBackend``
(connected) drives sagaboard's manual-flow API, where command undos wait for
an approver in the dashboard. Both answer every call with a :class:`Reply` (a
message for the model and a JSON-able dict) or raise :class:`ToolInputError`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from ..engine.ledger import default_owner
from ..engine.reports import RollbackReport
from ..engine.saga import Saga
from ..stores.record_json import record_json, time_text
from ..stores.sqlite_store import SQLiteStore
from ..vocabulary.errors import UndoCoreError
from ..vocabulary.outcome import status_text
from ..vocabulary.records import StepSnapshot
from ..vocabulary.states import SagaStatus, StepState
from ..vocabulary.tools import Tool, UndoContext, define_tool

__all__ = [
    "Backend",
    "LocalBackend",
    "PlannedUndo",
    "RemoteBackend",
    "Reply",
    "ToolInputError",
    "UndoPlan",
]

UNDO_COMMAND = "undoCommand"
"""The step metadata key that holds a step's undo command (standalone mode)."""


class ToolInputError(Exception):
    """A call the server cannot carry out: the model reads the message and corrects it."""


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PlannedUndo:
    """One undo command a rollback would run: what a person is asked to confirm."""

    step_id: str
    tool_name: str
    command: str
    input: Any = None


@dataclass(frozen=True, slots=True)
class UndoPlan:
    """The undo commands ``saga_rollback`` would run now, newest first, and where.

    Standalone mode shows it to the person before running anything; ``undos`` empty means
    the rollback runs no command (nothing to confirm). ``kept`` are the completed steps
    without an undo command: their side effects stay, and the person should know it.
    """

    saga_id: str
    name: str
    cwd: str
    undos: tuple[PlannedUndo, ...]
    kept: tuple[PlannedUndo, ...] = ()


class Backend(Protocol):
    mode: str

    def begin(self, name: str | None) -> Reply: ...
    def add_step(
        self, saga_id: str | None, tool_name: str, input: Any, undo_command: str | None
    ) -> Reply: ...
    def complete_step(self, saga_id: str | None, step_id: str, output: Any) -> Reply: ...
    def fail_step(self, saga_id: str | None, step_id: str, error: str) -> Reply: ...
    def rollback(self, saga_id: str | None) -> Reply: ...
    def status(self, saga_id: str | None) -> Reply: ...
    def list_steps(self, saga_id: str | None) -> Reply: ...
    def close(self) -> None: ...


# ---------------------------------------------------------------- checks shared by both modes


def _text(value: Any, field: str, *, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        need = "a non-empty string" if required else "a non-empty string or omitted"
        raise ToolInputError(f"{field} must be {need}, got {value!r}")
    return value


def _required(value: Any, field: str) -> str:
    text = _text(value, field)
    assert text is not None
    return text


def _short(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Current:
    """The saga a call without ``sagaId`` means: the last one begun by this server (the seed's)."""

    def __init__(self) -> None:
        self.saga_id: str | None = None

    def resolve(self, saga_id: Any) -> str:
        if saga_id is None:
            if self.saga_id is None:
                raise ToolInputError(
                    "no sagaId given and no saga begun in this session: call saga_begin first, "
                    "or pass the sagaId that saga_begin returned"
                )
            return self.saga_id
        return _required(saga_id, "sagaId")


# ---------------------------------------------------------------- standalone: undo_core + SQLite


def _noop(input: Any) -> None:
    """Steps of the MCP tools ran in the agent: the server only records them."""
    return None


def run_command(command: str, *, timeout: float, cwd: str | None) -> str:
    """Run one undo command through ``/bin/sh -c`` (as the seed does); its output, or raise.

    stdin is closed (the server's own stdin is the MCP stream); at the timeout the
    command's whole process group is killed.
    """
    proc = subprocess.Popen(
        command,
        shell=True,  # the seed's contract: undoCommand is a shell command line
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TimeoutError(f"undo command timed out after {timeout:g}s: {command}") from None
    if proc.returncode != 0:
        detail = (err or out).strip()[-500:]
        raise RuntimeError(
            f"undo command exited with code {proc.returncode}: {command}"
            + (f" ({detail})" if detail else "")
        )
    return out.strip()[-500:]


def _step_line(step: StepSnapshot) -> str:
    line = f"{step.id} {step.tool_name}: {step.state}"
    if step.error and step.state in (StepState.FAILED, StepState.ROLLBACK_FAILED):
        line += f" ({step.error})"
    return line


_SUMMARY_FIELDS = ("id", "tool_name", "state", "has_undo", "requires_approval", "error")
_DETAIL_FIELDS = (
    *_SUMMARY_FIELDS,
    "input",
    "output",
    "created_at",
    "updated_at",
    "completed_at",
    "attempts",
    "decision_note",
    "decided_by",
)
_REPLY_NAMES = {"id": "stepId", "attempts": "undoAttempts"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _step_fields(step: Mapping[str, Any], *, full: bool) -> dict[str, Any]:
    """A step object of the wire format (``stores.record_json``) as the tools' camelCase reply.

    Both modes answer with these keys, the standalone one from its own records and the
    connected one from sagaboard's answers, so a model sees one shape.
    """
    out = {
        _REPLY_NAMES.get(name) or _camel(name): step.get(name)
        for name in (_DETAIL_FIELDS if full else _SUMMARY_FIELDS)
    }
    if full:
        out["undoAttempts"] = [
            {_camel(key): value for key, value in attempt.items()}
            for attempt in step.get("attempts") or ()
        ]
    return out


def _local_step(step: StepSnapshot, *, full: bool = False) -> dict[str, Any]:
    out = _step_fields(record_json(step), full=full)
    if step.metadata.get(UNDO_COMMAND):
        out["undoCommand"] = step.metadata[UNDO_COMMAND]
    return out


def _rollback_text(steps: tuple[StepSnapshot, ...], report: RollbackReport) -> str:
    """The seed's message for a clean rollback after a failed step; a plain account otherwise."""
    by_id = {s.id: s for s in steps}

    def label(ids: tuple[str, ...]) -> str:
        return ", ".join(f'"{i}" ({by_id[i].tool_name})' for i in ids)

    failed = [s for s in steps if s.state is StepState.FAILED]
    head = (
        f'Task failed at step "{failed[-1].id}" ({failed[-1].tool_name}).'
        if failed
        else "Saga rolled back."
    )
    if report.clean:
        return f"{head} All prior side-effects successfully rolled back."
    parts = [head, f"Status: {report.status}."]
    if report.rolled_back:
        parts.append(f"Rolled back: {label(report.rolled_back)}.")
    if report.skipped:
        parts.append(f"No undoCommand, side-effects remain: {label(report.skipped)}.")
    for sid in report.failed:
        error = by_id[sid].error
        parts.append(f"Rollback failed: the undo of step {label((sid,))} failed: {error}.")
    if report.unresolved:
        parts.append(
            f"Manual intervention required; unresolved steps: {', '.join(report.unresolved)}."
        )
    return " ".join(parts)


class LocalBackend:
    """Sagas in a local SQLite file; undo commands run here, newest first, on rollback.

    Every call loads the saga from the file, acts and lets go of it, so the state
    survives a restart of the server and two servers may share one file.
    """

    mode = "standalone"

    def __init__(self, db: str | Path, *, timeout: float = 60.0, cwd: str | None = None) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be > 0 seconds")
        path = Path(db).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = path
        self.timeout = timeout
        self.cwd = cwd
        self._store = SQLiteStore(path)
        self._owner = default_owner()
        self._lock = threading.Lock()
        self._current = _Current()

    def close(self) -> None:
        close = getattr(self._store, "close", None)
        if callable(close):
            close()

    def _tool(self, name: str, commands: Mapping[str, str], *, with_undo: bool = True) -> Tool:
        def undo(output: Any, input: Any, ctx: UndoContext) -> str:
            command = commands.get(ctx.step_id)
            if command is None:
                raise LookupError(f"step {ctx.step_id!r} has no undoCommand")
            return run_command(command, timeout=self.timeout, cwd=self.cwd)

        return define_tool(name, _noop, undo if with_undo else None)

    @contextmanager
    def _saga(self, saga_id: Any) -> Iterator[Saga]:
        sid = self._current.resolve(saga_id)
        with self._lock:
            snapshot = self._store.load(sid)
            if snapshot is None:
                raise ToolInputError(f'no saga "{sid}": saga_begin returns the sagaId to use')
            commands = {
                s.id: str(s.metadata[UNDO_COMMAND])
                for s in snapshot.steps
                if s.metadata.get(UNDO_COMMAND)
            }
            tools = {s.tool_name: self._tool(s.tool_name, commands) for s in snapshot.steps}
            try:
                saga = Saga.restore(self._store, sid, tools, owner=self._owner)
            except UndoCoreError as err:
                raise ToolInputError(str(err)) from err
            try:
                yield saga
            except (UndoCoreError, ValueError, TypeError) as err:
                raise ToolInputError(str(err)) from err
            finally:
                saga.release()

    def _plan(self, saga: Saga) -> UndoPlan:
        run: list[PlannedUndo] = []
        kept: list[PlannedUndo] = []
        # A rolled back saga's rollback is a no-op; a COMPENSATING one is refused (the engine's).
        done = (SagaStatus.ROLLED_BACK, SagaStatus.ROLLBACK_FAILED, SagaStatus.COMPENSATING)
        if saga.status not in done:
            for step in reversed(saga.steps):
                if step.state is not StepState.COMPLETED:
                    continue
                command = step.metadata.get(UNDO_COMMAND)
                planned = PlannedUndo(step.id, step.tool_name, str(command or ""), step.input)
                (run if command else kept).append(planned)
        return UndoPlan(saga.id, saga.name, self.cwd or os.getcwd(), tuple(run), tuple(kept))

    def undo_plan(self, saga_id: str | None) -> UndoPlan:
        """What ``rollback(saga_id)`` would run now, to ask a person before it runs."""
        with self._saga(saga_id) as saga:
            return self._plan(saga)

    def _summary(self, saga: Saga) -> dict[str, Any]:
        found = saga.assess()
        return {
            "sagaId": saga.id,
            "name": saga.name,
            "status": str(saga.status),
            "outcome": found.outcome.value if found.outcome else None,
            "statusText": status_text(saga.status, found.outcome, found.summary),
            "mode": self.mode,
        }

    def begin(self, name: str | None) -> Reply:
        name = _text(name, "name", required=False)
        with self._lock:
            saga = Saga(name, store=self._store, owner=self._owner)
            saga.start()
            saga.release()
        self._current.saga_id = saga.id
        return Reply(
            f'Saga "{saga.name}" started with sagaId "{saga.id}" ({saga.status}). '
            "Register each step with saga_add_step before it runs.",
            self._summary(saga),
        )

    def add_step(
        self, saga_id: str | None, tool_name: str, input: Any, undo_command: str | None
    ) -> Reply:
        tool_name = _required(tool_name, "toolName")
        command = _text(undo_command, "undoCommand", required=False)
        with self._saga(saga_id) as saga:
            tool = self._tool(tool_name, {}, with_undo=command is not None)
            metadata = {UNDO_COMMAND: command} if command else None
            step_id = saga.add_step(tool, input, metadata=metadata)
            step = saga.step(step_id)
        undo = f"undo: {command}" if command else "no undo (its side effects stay on rollback)"
        return Reply(
            f'Step "{step_id}" ({tool_name}) registered as PENDING, {undo}. '
            f"Mark it with saga_complete_step or saga_fail_step.",
            {**self._summary(saga), "step": _local_step(step, full=True)},
        )

    def complete_step(self, saga_id: str | None, step_id: str, output: Any) -> Reply:
        step_id = _required(step_id, "stepId")
        with self._saga(saga_id) as saga:
            saga.mark_completed(step_id, output)
            step = saga.step(step_id)
        return Reply(
            f'Step "{step_id}" ({step.tool_name}) is COMPLETED: it will be undone on rollback.'
            if step.has_undo
            else f'Step "{step_id}" ({step.tool_name}) is COMPLETED (it has no undo).',
            {**self._summary(saga), "step": _local_step(step, full=True)},
        )

    def fail_step(self, saga_id: str | None, step_id: str, error: str) -> Reply:
        step_id = _required(step_id, "stepId")
        error = _required(error, "error")
        with self._saga(saga_id) as saga:
            saga.mark_failed(step_id, error)
            step = saga.step(step_id)
        return Reply(
            f'Step "{step_id}" ({step.tool_name}) is FAILED: {error}. The saga stays open: '
            "call saga_rollback to undo the completed steps.",
            {**self._summary(saga), "step": _local_step(step, full=True)},
        )

    def rollback(self, saga_id: str | None, *, approved: UndoPlan | None = None) -> Reply:
        """Run the undo commands of the completed steps, newest first.

        ``approved``: the plan a person confirmed. It is compared with the saga under the
        lock, so a saga changed in between (another server on the same file) runs nothing
        that was not shown.
        """
        with self._saga(saga_id) as saga:
            if approved is not None and self._plan(saga).undos != approved.undos:
                raise ToolInputError(
                    "the saga's undo commands changed after the person confirmed them; nothing "
                    "was run: call saga_rollback again to be asked about the current ones"
                )
            report = saga.rollback(actor="mcp")
            steps = saga.steps
        return Reply(
            _rollback_text(steps, report),
            {
                **self._summary(saga),
                "rolledBack": list(report.rolled_back),
                "failed": list(report.failed),
                "skipped": list(report.skipped),
                "unresolved": list(report.unresolved),
                "steps": [_local_step(s) for s in steps],
            },
        )

    def status(self, saga_id: str | None) -> Reply:
        with self._saga(saga_id) as saga:
            steps = saga.steps
        lines = "; ".join(_step_line(s) for s in steps) or "no steps"
        summary = self._summary(saga)
        return Reply(
            f'Saga "{saga.name}" ({saga.id}) is {summary["statusText"]}, {len(steps)} step(s): '
            f"{lines}.",
            {**summary, "steps": [_local_step(s) for s in steps]},
        )

    def list_steps(self, saga_id: str | None) -> Reply:
        with self._saga(saga_id) as saga:
            steps = saga.steps
        lines = [f'Saga "{saga.name}" ({saga.id}) is {saga.status}.']
        for s in steps:
            lines.append(f"- {_step_line(s)}")
            lines.append(f"  input: {_short(s.input)}; output: {_short(s.output)}")
            if s.metadata.get(UNDO_COMMAND):
                lines.append(f"  undoCommand: {s.metadata[UNDO_COMMAND]}")
            lines.append(f"  created {time_text(s.created_at)}, updated {time_text(s.updated_at)}")
        return Reply(
            "\n".join(lines),
            {**self._summary(saga), "steps": [_local_step(s, full=True) for s in steps]},
        )


# ---------------------------------------------------------------- connected: sagaboard's API

_WHERE = {
    "PENDING": "registered, not marked completed or failed yet",
    "COMPLETED": "done; undone on rollback",
    "FAILED": "failed; nothing to undo",
    "AWAITING_APPROVAL": "its undo waits for an approver in the dashboard",
    "COMPENSATING": "its undo is running in a sagaboard worker",
    "ROLLED_BACK": "undone",
    "ROLLBACK_FAILED": "its undo failed: an operator retries or resolves it in the dashboard",
    "REJECTED": "an approver rejected its undo: its side effects remain",
    "RESOLVED": "handled by hand by an operator",
    "IN_DOUBT": "in doubt: an operator must judge it",
}


_WAITING = {
    "sagaboard": "waiting for its undo (a command undo needs an approver's decision in the "
    "dashboard)",
    "nothing": "done, no undo: nothing to undo, its side effects remain",
    "agent": "its undo lives in the agent's process: sagaboard's workers never run it; an "
    "operator undoes it by hand and force-resolves it, or leaves it, in the dashboard",
}


def _remote_step(
    step: Mapping[str, Any], saga_status: str, *, full: bool = False
) -> dict[str, Any]:
    undo = step.get("undo") if isinstance(step.get("undo"), dict) else None
    state = str(step.get("state"))
    where = _WHERE.get(state, state)
    # Who runs the undo is sagaboard's one answer (``undo_runner``), never guessed here.
    runner = step.get("undo_runner") or ("sagaboard" if step.get("has_undo", True) else "nothing")
    if state == "COMPLETED" and saga_status in ("COMPENSATING", "ROLLBACK_FAILED"):
        where = _WAITING.get(str(runner), _WAITING["sagaboard"])
    out = {**_step_fields(step, full=full), "where": where, "undoRunner": runner}
    if undo is not None and undo.get("kind") == "command":
        out["undoCommand"] = undo.get("command")
    return out


class RemoteBackend:
    """The tools call sagaboard's manual-flow API (docs/api.md); sagaboard runs the undos."""

    mode = "connected"

    def __init__(self, url: str, token: str, *, timeout: float = 10.0, client: Any = None) -> None:
        if client is None:
            from ..remote import SagaboardClient  # needs httpx: only in connected mode

            client = SagaboardClient(url, token, timeout=timeout)
        self.url = url.rstrip("/")
        self._client = client
        self._current = _Current()

    def close(self) -> None:
        self._client.close()

    @contextmanager
    def _api(self) -> Iterator[None]:
        from ..remote import SagaboardAPIError, SagaboardUnavailable  # httpx: connected mode only

        try:
            yield
        except SagaboardAPIError as err:
            if err.status == 404:
                raise ToolInputError(f"not found in this sagaboard project: {err.message}") from err
            raise ToolInputError(str(err)) from err
        except SagaboardUnavailable as err:
            raise ToolInputError(f"{err} (try again once sagaboard is reachable)") from err

    def _summary(self, saga: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "sagaId": saga.get("id"),
            "name": saga.get("name"),
            "status": saga.get("status"),
            "outcome": saga.get("outcome"),
            "statusText": saga.get("status_text") or saga.get("status"),
            "waitingFor": saga.get("waiting_for"),
            "mode": self.mode,
            "dashboard": f"{self.url}/",
        }

    def _step_reply(self, saga_id: str, step: Mapping[str, Any], text: str) -> Reply:
        data = {"sagaId": saga_id, "mode": self.mode, "step": _remote_step(step, "", full=True)}
        return Reply(text, data)

    def begin(self, name: str | None) -> Reply:
        name = _text(name, "name", required=False)
        name = name or f"saga-{int(datetime.now().timestamp() * 1000)}"
        with self._api():
            saga = self._client.begin(name)
        self._current.saga_id = str(saga["id"])
        return Reply(
            f'Saga "{saga["name"]}" started on sagaboard with sagaId "{saga["id"]}" '
            f"({saga['status']}). Register each step with saga_add_step before it runs.",
            self._summary(saga),
        )

    def add_step(
        self, saga_id: str | None, tool_name: str, input: Any, undo_command: str | None
    ) -> Reply:
        sid = self._current.resolve(saga_id)
        tool_name = _required(tool_name, "toolName")
        command = _text(undo_command, "undoCommand", required=False)
        try:
            with self._api():
                step = self._client.add_step(sid, tool_name, input, undo=command)
        except ToolInputError as err:
            if "cannot_run_here" in str(err) or "undo." in str(err):
                # sagaboard cannot run this undo (e.g. command undos are off there): the step
                # is not registered, and the model must know before running the action.
                raise ToolInputError(
                    f"sagaboard refused the step, so nothing is registered and nothing could "
                    f"undo it: {err}"
                ) from err
            raise
        undo = (
            f"undo command: {command} (it will need an approver's decision in the dashboard)"
            if command
            else "no undo (its side effects stay on rollback)"
        )
        return self._step_reply(
            sid, step, f'Step "{step["id"]}" ({tool_name}) registered as PENDING, {undo}.'
        )

    def complete_step(self, saga_id: str | None, step_id: str, output: Any) -> Reply:
        sid = self._current.resolve(saga_id)
        step_id = _required(step_id, "stepId")
        with self._api():
            step = self._client.complete_step(sid, step_id, output)
        return self._step_reply(
            sid, step, f'Step "{step_id}" ({step.get("tool_name")}) is {step.get("state")}.'
        )

    def fail_step(self, saga_id: str | None, step_id: str, error: str) -> Reply:
        sid = self._current.resolve(saga_id)
        step_id = _required(step_id, "stepId")
        error = _required(error, "error")
        with self._api():
            step = self._client.fail_step(sid, step_id, error)
        return self._step_reply(
            sid,
            step,
            f'Step "{step_id}" ({step.get("tool_name")}) is FAILED: {error}. The saga stays '
            "open: call saga_rollback to undo the completed steps.",
        )

    def rollback(self, saga_id: str | None) -> Reply:
        sid = self._current.resolve(saga_id)
        with self._api():
            saga = self._client.rollback(sid, reason="saga_rollback (MCP)")
            if "steps" not in saga:
                saga = self._client.get_saga(sid)
        status = str(saga.get("status"))
        steps = [_remote_step(s, status) for s in saga.get("steps", [])]
        waiting = [s for s in steps if s["state"] in ("COMPLETED", "AWAITING_APPROVAL")]
        commands = [s for s in waiting if s.get("undoCommand")]
        text = (
            f'Rollback of saga "{saga.get("name")}" requested: it is {status}. sagaboard undoes '
            f"the {len(waiting)} completed step(s) newest first, in its workers."
        )
        queue = f"{self.url}/approvals/"
        page = self._saga_page(saga)
        if commands:
            ids = "; ".join(
                f'"{s["stepId"]}" ({s["toolName"]}, undo command: {s["undoCommand"]})'
                for s in commands
            )
            text += (
                f" Undo commands always need approval: {ids} wait for an approver in the "
                f"dashboard. Decide there, not in this chat: the approval queue {queue}"
                + (f" (the saga: {page})" if page else "")
                + ". Nothing has been undone yet; call saga_status to follow it."
            )
        return Reply(
            text,
            {
                **self._summary(saga),
                "awaitingApproval": [s["stepId"] for s in commands],
                "decideAt": queue if commands else None,
                "sagaPage": page,
                "steps": steps,
            },
        )

    def _saga_page(self, saga: Mapping[str, Any]) -> str | None:
        """The saga's dashboard page (``/sagas/<project>/<id>/``), if the answer names both."""
        project, sid = saga.get("project"), saga.get("id")
        if not project or not sid:
            return None
        return f"{self.url}/sagas/{quote(str(project), safe='')}/{quote(str(sid), safe='/')}/"

    def _get(self, saga_id: str | None) -> dict[str, Any]:
        sid = self._current.resolve(saga_id)
        with self._api():
            saga: dict[str, Any] = self._client.get_saga(sid)
        return saga

    def status(self, saga_id: str | None) -> Reply:
        saga = self._get(saga_id)
        status = str(saga.get("status"))
        steps = [_remote_step(s, status) for s in saga.get("steps", [])]
        lines = "; ".join(
            f"{s['stepId']} {s['toolName']}: {s['state']} ({s['where']})" for s in steps
        )
        shown = saga.get("status_text") or status
        return Reply(
            f'Saga "{saga.get("name")}" ({saga.get("id")}) is {shown}, {len(steps)} step(s): '
            f"{lines or 'no steps'}.",
            {**self._summary(saga), "steps": steps},
        )

    def list_steps(self, saga_id: str | None) -> Reply:
        saga = self._get(saga_id)
        status = str(saga.get("status"))
        steps = [_remote_step(s, status, full=True) for s in saga.get("steps", [])]
        lines = [f'Saga "{saga.get("name")}" ({saga.get("id")}) is {status}.']
        for s in steps:
            lines.append(f"- {s['stepId']} {s['toolName']}: {s['state']} ({s['where']})")
            lines.append(f"  input: {_short(s['input'])}; output: {_short(s['output'])}")
            if s.get("undoCommand"):
                lines.append(f"  undoCommand: {s['undoCommand']}")
            if s.get("error"):
                lines.append(f"  error: {s['error']}")
        return Reply("\n".join(lines), {**self._summary(saga), "steps": steps})

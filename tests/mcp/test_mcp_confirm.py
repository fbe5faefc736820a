"""``undo-mcp`` standalone asks the person in the chat before it runs undo commands.

The official SDK's ``Client`` drives the server in-process with an ``elicitation_callback``
(passing one declares the capability), on both protocol eras: ``legacy`` (a mid-call
``elicitation/create`` request) and ``auto`` (2026-07-28: an ``InputRequiredResult`` the client
answers by retrying). The undo command creates a marker file: it exists only if the undo ran.
A client without an ``elicitation_callback`` cannot ask: under the default nothing runs (unlike
agent-undo's MCP server); ``--confirm-undos run-unconfirmed`` is the opt-in that runs unasked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.types import INVALID_REQUEST, ElicitRequestParams, ElicitResult, ErrorData

from tests.support.undo_mcp_harness import call, mcp_session, text
from undo_core.mcp.backends import LocalBackend, RemoteBackend
from undo_core.mcp.server import build_server, main

ERAS = ["legacy", "auto"]  # handshake-era protocol, and 2026-07-28 (InputRequiredResult)
COMMAND = "touch undone.marker"
DELETE = "rm -f backup.json"  # the case: the file exists only if the undo did not run

Callback = Callable[[ClientRequestContext, ElicitRequestParams], Any]


class Person:
    """An elicitation callback that answers ``answer`` and keeps what it was shown."""

    def __init__(self, action: str, content: dict[str, Any] | None = None) -> None:
        self.action = action
        self.content = content
        self.asked: list[ElicitRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult:
        self.asked.append(params)
        return ElicitResult(action=self.action, content=self.content)  # type: ignore[arg-type]


@asynccontextmanager
async def standalone(
    tmp_path: Path,
    workdir: Path,
    *,
    confirm: str | None = None,
    person: Callback | None = None,
    mode: str = "legacy",
    timeout: float = 300.0,
) -> AsyncIterator[Client]:
    """An in-process server; ``confirm=None`` leaves ``--confirm-undos`` at its default."""
    backend = LocalBackend(tmp_path / "sagas.sqlite3", cwd=str(workdir))
    chosen = {} if confirm is None else {"confirm_undos": confirm}
    server = build_server(backend, confirm_timeout=timeout, **chosen)
    try:
        async with Client(server, elicitation_callback=person, mode=mode) as client:  # type: ignore[arg-type]
            yield client
    finally:
        backend.close()


async def ready_saga(client: Client) -> str:
    """A saga with one completed step whose undo creates the marker file, and a failed one."""
    sid = (await call(client, "saga_begin", name="cleanup"))["sagaId"]
    await call(
        client,
        "saga_add_step",
        sagaId=sid,
        toolName="create_backup",
        input={"file": "backup.json"},
        undoCommand=COMMAND,
    )
    await call(client, "saga_complete_step", sagaId=sid, stepId="step-1")
    await call(client, "saga_add_step", sagaId=sid, toolName="send_email")
    await call(client, "saga_complete_step", sagaId=sid, stepId="step-2")
    return sid


async def steps_unchanged(client: Client, sid: str) -> None:
    status = await call(client, "saga_status", sagaId=sid)
    assert status["status"] == "IN_PROGRESS"
    assert [(s["stepId"], s["state"]) for s in status["steps"]] == [
        ("step-1", "COMPLETED"),
        ("step-2", "COMPLETED"),
    ]


@pytest.mark.parametrize("era", ERAS)
async def test_a_confirmed_rollback_runs_and_the_question_shows_command_directory_and_step(
    tmp_path: Path, workdir: Path, era: str
) -> None:
    person = Person("accept", {"confirm": True, "reason": "the test is over"})
    async with standalone(tmp_path, workdir, person=person, mode=era) as client:
        assert (client.protocol_version >= "2026-07-28") is (era == "auto")
        sid = await ready_saga(client)
        assert not (workdir / "undone.marker").exists()
        result = await client.call_tool("saga_rollback", {"sagaId": sid})
        assert not result.is_error, text(result)
        assert (workdir / "undone.marker").exists()
        data = result.structured_content
        assert data["status"] == "ROLLED_BACK" and data["rolledBack"] == ["step-1"]
        assert data["confirmation"]["answer"] == "accepted" and data["confirmation"]["asked"]
        assert "confirmed" in text(result) and "the test is over" in text(result)

    assert len(person.asked) == 1
    message = person.asked[0].message
    assert COMMAND in message
    assert str(workdir) in message
    assert "step-1 (create_backup" in message and '"backup.json"' in message
    assert sid in message and "/bin/sh -c" in message
    assert "send_email" in message  # completed without undo: its side effects stay
    schema = person.asked[0].requested_schema  # type: ignore[union-attr]
    assert schema["properties"]["confirm"]["type"] == "boolean"
    assert schema["required"] == ["confirm"]
    assert all(p["type"] in ("boolean", "string") for p in schema["properties"].values())


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(
    ("answer", "content", "said"),
    [
        ("decline", None, "declined"),
        ("cancel", None, "dismissed the question"),
        ("accept", {"confirm": False, "reason": "keep it"}, "declined"),
    ],
)
async def test_a_declined_or_cancelled_rollback_runs_nothing_and_says_so(
    tmp_path: Path,
    workdir: Path,
    era: str,
    answer: str,
    content: dict[str, Any] | None,
    said: str,
) -> None:
    person = Person(answer, content)
    async with standalone(tmp_path, workdir, person=person, mode=era) as client:
        sid = await ready_saga(client)
        result = await client.call_tool("saga_rollback", {"sagaId": sid})
        assert not result.is_error, text(result)
        message = text(result)
        assert message.startswith("Nothing was undone:") and said in message
        assert COMMAND in message  # what was not run, for the person to decide on
        assert result.structured_content["rolledBack"] == []
        assert result.structured_content["confirmation"]["ran"] is False
        await steps_unchanged(client, sid)
        # asked again, accepted this time: the same saga rolls back
        person.action, person.content = "accept", {"confirm": True}
        again = await call(client, "saga_rollback", sagaId=sid)
        assert again["status"] == "ROLLED_BACK"
    assert len(person.asked) == 2
    assert (workdir / "undone.marker").exists()


async def test_no_answer_within_the_timeout_runs_nothing(tmp_path: Path, workdir: Path) -> None:
    async def silent(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        await anyio.sleep(30)
        raise AssertionError("the server stops waiting first")

    async with standalone(tmp_path, workdir, person=silent, timeout=0.5) as client:
        sid = await ready_saga(client)
        with anyio.fail_after(10):
            result = await client.call_tool("saga_rollback", {"sagaId": sid})
        assert not result.is_error, text(result)
        assert "did not answer within 0.5s" in text(result)
        assert result.structured_content["confirmation"]["answer"] == "timeout"
        await steps_unchanged(client, sid)
    assert not (workdir / "undone.marker").exists()


async def test_a_client_that_declares_elicitation_but_cannot_show_it_runs_nothing(
    tmp_path: Path, workdir: Path
) -> None:
    async def unsupported(context: ClientRequestContext, params: ElicitRequestParams) -> ErrorData:
        return ErrorData(code=INVALID_REQUEST, message="Elicitation not supported")

    async with standalone(tmp_path, workdir, person=unsupported) as client:
        sid = await ready_saga(client)
        result = await client.call_tool("saga_rollback", {"sagaId": sid})
        assert not result.is_error, text(result)
        assert "could not show the question" in text(result)
        assert "Elicitation not supported" in text(result)
        assert result.structured_content["confirmation"]["answer"] == "unsupported"
        await steps_unchanged(client, sid)
    assert not (workdir / "undone.marker").exists()


async def backup_saga(client: Client, workdir: Path) -> str:
    """The seed's step: a backup file whose undo command deletes it."""
    (workdir / "backup.json").write_text("{}")
    sid = (await call(client, "saga_begin", name="checkout-flow"))["sagaId"]
    await call(client, "saga_add_step", sagaId=sid, toolName="create_backup", undoCommand=DELETE)
    await call(client, "saga_complete_step", sagaId=sid, stepId="step-1")
    return sid


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_without_elicitation_gets_the_commands_and_nothing_runs_by_default(
    tmp_path: Path, workdir: Path, era: str
) -> None:
    async with standalone(tmp_path, workdir, person=None, mode=era) as client:  # the default
        sid = await backup_saga(client, workdir)
        result = await client.call_tool("saga_rollback", {"sagaId": sid})
        assert not result.is_error, text(result)
        message = text(result)
        assert message.startswith("Nothing was undone:")
        assert "cannot ask" in message and "no person confirmed" in message
        assert DELETE in message and str(workdir) in message  # the commands, listed
        # how a person can have them run: by hand, a client that asks, the approval queue,
        # or the flag that names the risk
        assert "in a terminal" in message and "elicitation" in message
        assert "--url" in message and "approval queue" in message
        assert "--confirm-undos run-unconfirmed" in message and "unreviewed" in message
        data = result.structured_content
        assert data["status"] == "IN_PROGRESS" and data["rolledBack"] == []
        assert data["undoCommands"] == [
            {"stepId": "step-1", "toolName": "create_backup", "command": DELETE}
        ]
        confirmation = data["confirmation"]
        assert confirmation["mode"] == "elicit"
        assert confirmation["answer"] == "no-elicitation"
        assert confirmation["asked"] is False and confirmation["ran"] is False
        assert "nothing ran" in confirmation["note"] and "run-unconfirmed" in confirmation["note"]
        status = await call(client, "saga_status", sagaId=sid)
        assert [(s["stepId"], s["state"]) for s in status["steps"]] == [("step-1", "COMPLETED")]
    assert (workdir / "backup.json").exists(), "the undo command did not run"


@pytest.mark.parametrize("can_ask", [True, False])
async def test_run_unconfirmed_is_the_opt_in_that_runs_without_asking(
    tmp_path: Path, workdir: Path, can_ask: bool
) -> None:
    person = Person("decline") if can_ask else None
    async with standalone(tmp_path, workdir, confirm="run-unconfirmed", person=person) as client:
        sid = await backup_saga(client, workdir)
        result = await client.call_tool("saga_rollback", {"sagaId": sid})
        assert not result.is_error, text(result)
        # the seed's message, word for word: the opt-in is agent-undo's behaviour
        assert text(result) == "Saga rolled back. All prior side-effects successfully rolled back."
        data = result.structured_content
        assert data["status"] == "ROLLED_BACK" and data["rolledBack"] == ["step-1"]
        confirmation = data["confirmation"]
        assert {k: confirmation[k] for k in ("mode", "asked", "answer", "ran")} == {
            "mode": "run-unconfirmed",
            "asked": False,
            "answer": "unconfirmed",
            "ran": True,
        }
        assert "without anyone confirming" in confirmation["note"]
    assert person is None or person.asked == []
    assert not (workdir / "backup.json").exists()


@pytest.mark.parametrize("can_ask", [True, False])
async def test_never_is_a_deprecated_spelling_that_now_refuses(
    tmp_path: Path, workdir: Path, can_ask: bool
) -> None:
    person = Person("accept", {"confirm": True}) if can_ask else None
    async with standalone(tmp_path, workdir, confirm="never", person=person) as client:
        tools = {t.name: t.description or "" for t in (await client.list_tools()).tools}
        assert "never runs undo commands" in tools["saga_rollback"]
        assert "--confirm-undos never, deprecated" in tools["saga_rollback"]
        sid = await backup_saga(client, workdir)
        result = await client.call_tool("saga_rollback", {"sagaId": sid})
        assert not result.is_error, text(result)
        message = text(result)
        assert message.startswith("Nothing was undone:") and "deprecated" in message
        assert "--confirm-undos run-unconfirmed" in message and DELETE in message
        confirmation = result.structured_content["confirmation"]
        assert confirmation["mode"] == "always-refuse"
        assert confirmation["deprecatedMode"] == "never"
        assert (confirmation["answer"], confirmation["ran"]) == ("refused", False)
    assert person is None or person.asked == []
    assert (workdir / "backup.json").exists()


@pytest.mark.parametrize(
    ("confirm", "rollback_says", "add_step_says"),
    [
        (None, ["--confirm-undos elicit", "cannot ask", "nothing runs"], ["does not run"]),
        ("elicit", ["--confirm-undos elicit", "unless a person confirmed"], ["confirms it"]),
        ("always-refuse", ["--confirm-undos always-refuse", "never runs"], ["never runs it"]),
        (
            "run-unconfirmed",
            ["WARNING", "--confirm-undos run-unconfirmed", "without asking anyone"],
            ["WARNING", "without anyone confirming"],
        ),
    ],
)
async def test_the_tool_descriptions_say_what_the_mode_does(
    tmp_path: Path,
    workdir: Path,
    confirm: str | None,
    rollback_says: list[str],
    add_step_says: list[str],
) -> None:
    async with standalone(tmp_path, workdir, confirm=confirm) as client:
        tools = {t.name: t.description or "" for t in (await client.list_tools()).tools}
        instructions = client.instructions or ""
    for said in rollback_says:
        assert said in tools["saga_rollback"], (said, tools["saga_rollback"])
    for said in add_step_says:
        assert said in tools["saga_add_step"], (said, tools["saga_add_step"])
    assert "undoCommand" in tools["saga_add_step"]
    assert ("without anyone confirming" in instructions) is (confirm == "run-unconfirmed")


def test_the_help_names_the_modes_and_the_departure_from_agent_undo(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "10000")  # argparse would break lines at "run-"
    monkeypatch.delenv("UNDO_MCP_CONFIRM_UNDOS", raising=False)
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "{elicit,always-refuse,run-unconfirmed}" in out
    assert "Unlike agent-undo's MCP server" in out
    assert "never runs an undo command that no person confirmed" in out
    assert "'run-unconfirmed' runs them at once without asking anyone" in out
    assert "'never' is a deprecated spelling that now means always-refuse" in out
    assert "Default elicit (or $UNDO_MCP_CONFIRM_UNDOS)" in out


@pytest.mark.parametrize("can_ask", [True, False])
async def test_always_refuse_never_runs_undo_commands_and_says_where_to_run_them(
    tmp_path: Path, workdir: Path, can_ask: bool
) -> None:
    person = Person("accept", {"confirm": True}) if can_ask else None
    async with standalone(tmp_path, workdir, confirm="always-refuse", person=person) as client:
        tools = {t.name: t.description or "" for t in (await client.list_tools()).tools}
        assert "never runs undo commands" in tools["saga_rollback"]
        sid = await ready_saga(client)
        result = await client.call_tool("saga_rollback", {"sagaId": sid})
        assert not result.is_error, text(result)
        message = text(result)
        assert "--confirm-undos always-refuse" in message
        assert "in a terminal" in message and str(workdir) in message and COMMAND in message
        assert result.structured_content["undoCommands"] == [
            {"stepId": "step-1", "toolName": "create_backup", "command": COMMAND}
        ]
        await steps_unchanged(client, sid)
    assert person is None or person.asked == []
    assert not (workdir / "undone.marker").exists()


async def test_a_rollback_without_undo_commands_asks_nothing(tmp_path: Path, workdir: Path) -> None:
    person = Person("decline")
    async with standalone(tmp_path, workdir, person=person) as client:
        sid = (await call(client, "saga_begin", name="mail"))["sagaId"]
        await call(client, "saga_add_step", sagaId=sid, toolName="send_email")
        await call(client, "saga_complete_step", sagaId=sid, stepId="step-1")
        data = await call(client, "saga_rollback", sagaId=sid)
        assert data["status"] == "ROLLED_BACK"
        assert "bad" in await _bad_saga_error(client)
    assert person.asked == []


async def _bad_saga_error(client: Client) -> str:
    result = await client.call_tool("saga_rollback", {"sagaId": "bad"})
    assert result.is_error  # an unknown saga stays a tool error, nothing asked
    return text(result)


@pytest.mark.slow  # starts the server in a subprocess
async def test_the_console_script_asks_over_stdio_and_reads_the_env_setting(
    tmp_path: Path, workdir: Path
) -> None:
    person = Person("decline")
    db = str(tmp_path / "sagas.sqlite3")
    async with mcp_session("--db", db, cwd=workdir, elicitation_callback=person) as session:
        sid = await ready_saga(session)  # type: ignore[arg-type]
        declined = await session.call_tool("saga_rollback", {"sagaId": sid})
        assert "declined" in text(declined)
    assert len(person.asked) == 1 and str(workdir) in person.asked[0].message
    assert not (workdir / "undone.marker").exists()
    env = {"UNDO_MCP_CONFIRM_UNDOS": "always-refuse"}
    async with mcp_session("--db", db, cwd=workdir, env=env) as session:
        refused = await session.call_tool("saga_rollback", {"sagaId": sid})
        assert "--confirm-undos always-refuse" in text(refused)
    assert not (workdir / "undone.marker").exists()
    async with mcp_session("--db", db, cwd=workdir) as session:  # no elicitation, the default
        unasked = await session.call_tool("saga_rollback", {"sagaId": sid})
        assert text(unasked).startswith("Nothing was undone:") and COMMAND in text(unasked)
    assert not (workdir / "undone.marker").exists()
    async with mcp_session("--db", db, "--confirm-undos", "run-unconfirmed", cwd=workdir) as s:
        assert (await call(s, "saga_rollback", sagaId=sid))["status"] == "ROLLED_BACK"
    assert (workdir / "undone.marker").exists()


class FakeSagaboard:
    """The few ``SagaboardClient`` calls ``RemoteBackend`` makes, answered as sagaboard does."""

    def __init__(self) -> None:
        self.saga: dict[str, Any] = {}

    def begin(self, name: str) -> dict[str, Any]:
        self.saga = {"id": "s/1", "name": name, "project": "shop", "status": "IN_PROGRESS"}
        self.saga["steps"] = []
        return self.saga

    def add_step(self, sid: str, tool: str, input: Any, undo: str | None) -> dict[str, Any]:
        step = {"id": f"step-{len(self.saga['steps']) + 1}", "tool_name": tool}
        step |= {"state": "PENDING", "has_undo": bool(undo), "requires_approval": bool(undo)}
        step["undo"] = {"kind": "command", "command": undo} if undo else None
        self.saga["steps"].append(step)
        return step

    def complete_step(self, sid: str, step_id: str, output: Any) -> dict[str, Any]:
        step: dict[str, Any] = next(s for s in self.saga["steps"] if s["id"] == step_id)
        step["state"] = "COMPLETED"
        return step

    def rollback(self, sid: str, reason: str) -> dict[str, Any]:
        self.saga["status"] = "COMPENSATING"
        return self.saga

    def get_saga(self, sid: str) -> dict[str, Any]:
        return self.saga

    def close(self) -> None:
        pass


@pytest.mark.parametrize("confirm", ["elicit", "always-refuse", "run-unconfirmed"])
async def test_connected_mode_asks_nothing_in_the_chat_and_names_where_to_decide(
    confirm: str,
) -> None:
    person = Person("accept", {"confirm": True})
    backend = RemoteBackend("https://sagaboard.example/", "sgb_x", client=FakeSagaboard())
    server = build_server(backend, confirm_undos=confirm)
    async with Client(server, elicitation_callback=person) as client:
        sid = (await call(client, "saga_begin", name="ops"))["sagaId"]
        await call(client, "saga_add_step", sagaId=sid, toolName="backup", undoCommand=COMMAND)
        await call(client, "saga_complete_step", sagaId=sid, stepId="step-1")
        result = await client.call_tool("saga_rollback", {"sagaId": sid})
    assert not result.is_error, text(result)
    queue = "https://sagaboard.example/approvals/"
    page = "https://sagaboard.example/sagas/shop/s/1/"
    assert result.structured_content["decideAt"] == queue
    assert result.structured_content["sagaPage"] == page
    assert result.structured_content["awaitingApproval"] == ["step-1"]
    message = text(result)
    assert queue in message and page in message and "not in this chat" in message
    assert f"undo command: {COMMAND}" in message  # the commands listed, as in standalone
    assert "Nothing has been undone yet" in message
    assert person.asked == []  # sagaboard's approval queue is the authority

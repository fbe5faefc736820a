"""``undo-mcp`` standalone: the seed's walk-through, bad arguments, restarts, timeouts.

The SDK's ``ClientSession`` here declares no elicitation, so it cannot ask the person: under
the default nothing runs (unlike the seed); the tests that run undo commands opt in with
``--confirm-undos run-unconfirmed`` (:data:`UNCONFIRMED`), the seed's behaviour.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.support.undo_mcp_harness import Connect, call, call_error, text

pytestmark = pytest.mark.slow  # each test starts the server in a subprocess

UNCONFIRMED = ("--confirm-undos", "run-unconfirmed")  # the seed's behaviour: run unasked

SEVEN = {
    "saga_begin": {"name"},
    "saga_add_step": {"sagaId", "toolName", "input", "undoCommand"},
    "saga_complete_step": {"sagaId", "stepId", "output"},
    "saga_fail_step": {"sagaId", "stepId", "error"},
    "saga_rollback": {"sagaId"},
    "saga_status": {"sagaId"},
    "saga_list_steps": {"sagaId"},
}


async def test_the_seven_tools_with_the_seeds_arguments(connect: Connect) -> None:
    async with connect() as session:
        tools = (await session.list_tools()).tools
    assert {t.name: set(t.input_schema["properties"]) for t in tools} == SEVEN
    required = {t.name: set(t.input_schema.get("required", [])) for t in tools}
    assert required["saga_add_step"] == {"toolName"}
    assert required["saga_fail_step"] == {"stepId", "error"}
    assert all(t.description for t in tools)


async def test_seed_walkthrough_rolls_back_newest_first(connect: Connect, workdir: Path) -> None:
    (workdir / "backup.json").write_text("{}")
    async with connect(*UNCONFIRMED) as session:
        saga = await call(session, "saga_begin", name="checkout-flow")
        sid = saga["sagaId"]
        assert saga["status"] == "IN_PROGRESS" and saga["name"] == "checkout-flow"
        step = await call(
            session,
            "saga_add_step",
            sagaId=sid,
            toolName="create_backup",
            input={"file": "backup.json"},
            undoCommand="echo 1 >> undo.log; rm -f backup.json",
        )
        assert step["step"]["stepId"] == "step-1"
        assert step["step"]["state"] == "PENDING"
        await call(session, "saga_complete_step", sagaId=sid, stepId="step-1", output={"ok": 1})
        await call(
            session,
            "saga_add_step",
            sagaId=sid,
            toolName="charge",
            undoCommand="echo 2 >> undo.log",
        )
        await call(session, "saga_complete_step", sagaId=sid, stepId="step-2")
        await call(session, "saga_add_step", sagaId=sid, toolName="generate_label")
        failed = await call(
            session, "saga_fail_step", sagaId=sid, stepId="step-3", error="shipping API down"
        )
        assert failed["step"]["state"] == "FAILED"
        assert (workdir / "backup.json").exists(), "nothing is undone before saga_rollback"

        result = await session.call_tool("saga_rollback", {"sagaId": sid})
        assert not result.is_error
        assert text(result) == (
            'Task failed at step "step-3" (generate_label). '
            "All prior side-effects successfully rolled back."
        )
        assert result.structured_content["status"] == "ROLLED_BACK"
        assert result.structured_content["rolledBack"] == ["step-2", "step-1"]
        assert not (workdir / "backup.json").exists()
        assert (workdir / "undo.log").read_text().split() == ["2", "1"]  # LIFO

        status = await call(session, "saga_status", sagaId=sid)
        assert (status["outcome"], status["statusText"]) == ("CLEAN", "ROLLED_BACK")
        assert [(s["stepId"], s["state"]) for s in status["steps"]] == [
            ("step-1", "ROLLED_BACK"),
            ("step-2", "ROLLED_BACK"),
            ("step-3", "FAILED"),
        ]
        listed = await session.call_tool("saga_list_steps", {"sagaId": sid})
        detail = listed.structured_content["steps"]
        assert detail[0]["input"] == {"file": "backup.json"}
        assert detail[0]["output"] == {"ok": 1}
        assert detail[0]["undoCommand"] == "echo 1 >> undo.log; rm -f backup.json"
        assert detail[0]["undoAttempts"][0]["outcome"] == "succeeded"
        assert detail[2]["error"] == "shipping API down"
        assert "shipping API down" in text(listed)

        again = await call(session, "saga_rollback", sagaId=sid)  # a second rollback: no-op
        assert again["status"] == "ROLLED_BACK"
    assert (workdir / "undo.log").read_text().split() == ["2", "1"]


async def test_the_seeds_rollback_by_default_lists_the_commands_and_undoes_nothing(
    connect: Connect, workdir: Path
) -> None:
    """The issue's case: a client without elicitation, ``rm -f backup.json``, the default."""
    (workdir / "backup.json").write_text("{}")
    async with connect() as session:
        tools = {t.name: t.description or "" for t in (await session.list_tools()).tools}
        assert "--confirm-undos elicit" in tools["saga_rollback"]
        assert "nothing runs" in tools["saga_rollback"]
        await call(session, "saga_begin", name="checkout-flow")
        await call(
            session, "saga_add_step", toolName="create_backup", undoCommand="rm -f backup.json"
        )
        await call(session, "saga_complete_step", stepId="step-1")
        await call(session, "saga_add_step", toolName="generate_label")
        await call(session, "saga_fail_step", stepId="step-2", error="shipping API down")
        result = await session.call_tool("saga_rollback", {})
        assert not result.is_error, text(result)
        message = text(result)
        assert message.startswith("Nothing was undone:")
        assert "rm -f backup.json" in message and str(workdir) in message
        assert "--confirm-undos run-unconfirmed" in message
        data = result.structured_content
        assert data["rolledBack"] == [] and data["status"] == "IN_PROGRESS"
        assert data["confirmation"]["answer"] == "no-elicitation"
        assert data["confirmation"]["ran"] is False
    assert (workdir / "backup.json").exists(), "no person confirmed the undo command"


async def test_sagaid_may_be_omitted_as_in_the_seed(connect: Connect, workdir: Path) -> None:
    (workdir / "backup.json").write_text("{}")
    async with connect(*UNCONFIRMED) as session:
        assert "saga_begin first" in await call_error(session, "saga_status")
        await call(session, "saga_begin", name="checkout-flow")
        await call(session, "saga_add_step", toolName="create_backup", undoCommand="rm backup.json")
        await call(session, "saga_complete_step", stepId="step-1")
        data = await call(session, "saga_rollback")
    assert data["status"] == "ROLLED_BACK"
    assert not (workdir / "backup.json").exists()


async def test_bad_arguments_are_tool_errors_and_the_server_keeps_answering(
    connect: Connect,
) -> None:
    async with connect() as session:
        message = await call_error(session, "saga_status", sagaId="no-such-saga")
        assert "no-such-saga" in message
        assert "no-such-saga" in await call_error(
            session, "saga_add_step", sagaId="no-such-saga", toolName="x"
        )
        sid = (await call(session, "saga_begin", name="demo"))["sagaId"]
        assert "toolName" in await call_error(session, "saga_add_step", sagaId=sid)  # missing
        assert "toolName" in await call_error(session, "saga_add_step", sagaId=sid, toolName=" ")
        assert "undoCommand" in await call_error(
            session, "saga_add_step", sagaId=sid, toolName="x", undoCommand=""
        )
        assert "step-9" in await call_error(
            session, "saga_complete_step", sagaId=sid, stepId="step-9"
        )
        assert "error" in await call_error(session, "saga_fail_step", sagaId=sid, stepId="step-1")
        await call(session, "saga_add_step", sagaId=sid, toolName="x")
        await call(session, "saga_complete_step", sagaId=sid, stepId="step-1")
        twice = await call_error(session, "saga_complete_step", sagaId=sid, stepId="step-1")
        assert re.search(r"\bCOMPLETED\b", twice)
        await call(session, "saga_rollback", sagaId=sid)
        closed = await call_error(session, "saga_add_step", sagaId=sid, toolName="late")
        assert re.search(r"\bROLLED_BACK\b", closed)
        # still serving, and the saga is intact
        status = await call(session, "saga_status", sagaId=sid)
        assert status["status"] == "ROLLED_BACK" and len(status["steps"]) == 1


async def test_a_restart_keeps_the_saga(connect: Connect, workdir: Path) -> None:
    (workdir / "backup.json").write_text("{}")
    async with connect() as session:
        sid = (await call(session, "saga_begin", name="survivor"))["sagaId"]
        await call(
            session,
            "saga_add_step",
            sagaId=sid,
            toolName="create_backup",
            undoCommand="rm -f backup.json",
        )
        await call(session, "saga_complete_step", sagaId=sid, stepId="step-1")
        await call(session, "saga_add_step", sagaId=sid, toolName="upload")
    async with connect(*UNCONFIRMED) as session:  # a new server process on the same file
        status = await call(session, "saga_status", sagaId=sid)
        assert status["name"] == "survivor" and status["status"] == "IN_PROGRESS"
        assert [(s["stepId"], s["state"]) for s in status["steps"]] == [
            ("step-1", "COMPLETED"),
            ("step-2", "PENDING"),
        ]
        await call(session, "saga_fail_step", sagaId=sid, stepId="step-2", error="disk full")
        result = await session.call_tool("saga_rollback", {"sagaId": sid})
        assert text(result).startswith('Task failed at step "step-2" (upload).')
    assert not (workdir / "backup.json").exists()


async def test_a_failing_or_hanging_undo_command_is_reported(connect: Connect) -> None:
    async with connect("--timeout", "1", *UNCONFIRMED) as session:
        sid = (await call(session, "saga_begin", name="stubborn"))["sagaId"]
        await call(session, "saga_add_step", sagaId=sid, toolName="a", undoCommand="sleep 30")
        await call(session, "saga_complete_step", sagaId=sid, stepId="step-1")
        await call(session, "saga_add_step", sagaId=sid, toolName="b", undoCommand="exit 3")
        await call(session, "saga_complete_step", sagaId=sid, stepId="step-2")
        started = time.monotonic()
        result = await session.call_tool("saga_rollback", {"sagaId": sid})
        assert time.monotonic() - started < 15
        assert not result.is_error  # the rollback ran; what it left is in the answer
        data = result.structured_content
        assert data["status"] == "ROLLBACK_FAILED"
        assert data["failed"] == ["step-2", "step-1"]  # both were tried, newest first
        message = text(result)
        assert "exited with code 3" in message
        assert "timed out after 1s" in message
        assert "Manual intervention required" in message


async def test_a_step_left_without_undo_command_makes_the_rollback_one_with_exceptions(
    connect: Connect,
) -> None:
    async with connect() as session:
        sid = (await call(session, "saga_begin", name="mail"))["sagaId"]
        await call(session, "saga_add_step", sagaId=sid, toolName="send_email")
        await call(session, "saga_complete_step", sagaId=sid, stepId="step-1")
        await call(session, "saga_rollback", sagaId=sid)
        result = await session.call_tool("saga_status", {"sagaId": sid})
        assert result.structured_content["status"] == "ROLLED_BACK"
        assert result.structured_content["outcome"] == "WITH_EXCEPTIONS"
        assert "ROLLED BACK with exceptions (1 without undo)" in text(result)

"""``undo-mcp --url``: the tools drive a real local sagaboard (``tests.support.live_server``).

The saga is run by sagaboard: its command undo waits for an approver, and a
rejection leaves the side effect in place. The worker's logic is run by hand
(``runner.rollback_continue`` in a ``manage.py shell``), as a worker would.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.live_server import Server, manage, prepare, temp_database
from tests.support.undo_mcp_harness import call, mcp_session, text
from undo_core.remote import SagaboardClient

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))

WORKER = """
import json
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sagaboard.actions.services import runner
from sagaboard.approvals.services import approvals
from sagaboard.models import Approval, Saga

saga = Saga.objects.get(saga_id=SID)
out = {"first": runner.rollback_continue(saga.pk)}
pending = Approval.objects.filter(saga=saga, status=Approval.Status.PENDING)
out["pending"] = [(a.step.step_id, a.plan.get("command")) for a in pending]
user = get_user_model().objects.create_user("olga", password="pw-olga-123456")
user.groups.add(Group.objects.get(name="approver"))
saga.project.members.add(user)
for a in pending:
    approvals.approval_decide(
        approval_id=a.pk, user=user, decision="reject", reason="keep the backup"
    )
out["then"] = runner.rollback_continue(saga.pk)
out["approvals"] = list(Approval.objects.filter(saga=saga).values_list("status", flat=True))
print(json.dumps(out))
"""


@pytest.fixture
def sagaboard(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(database URL, server URL, token) of a live local sagaboard that allows command undos."""
    with temp_database("postgres" if PG else "sqlite", tmp_path) as db:
        token = prepare(db)
        with Server(db, env={"SAGABOARD_ALLOW_COMMAND_UNDOS": "1"}) as srv:
            yield db, srv.url, token


async def test_a_server_with_command_undos_off_refuses_the_step_and_the_tool_says_why(
    tmp_path: Path, workdir: Path
) -> None:
    with temp_database("postgres" if PG else "sqlite", tmp_path) as db:
        token = prepare(db)
        with Server(db, env={"SAGABOARD_ALLOW_COMMAND_UNDOS": "0"}) as srv:
            env = {"SAGABOARD_TOKEN": token}
            async with mcp_session("--url", srv.url, cwd=workdir, env=env) as session:
                tools = {t.name: t.description or "" for t in (await session.list_tools()).tools}
                assert "WITHOUT a shell" in tools["saga_add_step"]
                assert "approves" in tools["saga_add_step"]
                assert "nothing has been undone yet" in tools["saga_rollback"]
                sid = (await call(session, "saga_begin", name="ops"))["sagaId"]
                refused = await session.call_tool(
                    "saga_add_step",
                    {"sagaId": sid, "toolName": "create_backup", "undoCommand": "rm -f b.json"},
                )
                assert refused.is_error
                message = text(refused)
                assert "sagaboard refused the step" in message
                assert "SAGABOARD_ALLOW_COMMAND_UNDOS" in message and "undo.kind" in message
                with SagaboardClient(srv.url, token) as client:
                    assert client.get_saga(sid)["steps"] == []  # nothing half-registered


async def test_connected_mode_leaves_command_undos_to_approvers(
    sagaboard: tuple[str, str, str], workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, url, token = sagaboard
    backup = workdir / "backup.json"
    backup.write_text("{}")
    async with mcp_session("--url", url, cwd=workdir, env={"SAGABOARD_TOKEN": token}) as session:
        saga = await call(session, "saga_begin", name="checkout-flow")
        sid = saga["sagaId"]
        assert saga["mode"] == "connected"
        await call(
            session,
            "saga_add_step",
            sagaId=sid,
            toolName="create_backup",
            input={"file": str(backup)},
            undoCommand=f"rm -f {backup}",
        )
        await call(session, "saga_complete_step", sagaId=sid, stepId="step-1", output={"ok": 1})
        await call(session, "saga_add_step", sagaId=sid, toolName="generate_label")
        await call(session, "saga_fail_step", sagaId=sid, stepId="step-2", error="shipping down")

        with SagaboardClient(url, token) as client:  # the steps are on the server
            remote = client.get_saga(sid)
        assert [(s["id"], s["tool_name"], s["state"]) for s in remote["steps"]] == [
            ("step-1", "create_backup", "COMPLETED"),
            ("step-2", "generate_label", "FAILED"),
        ]
        undo = remote["steps"][0]["undo"]
        assert (undo["kind"], undo["command"]) == ("command", f"rm -f {backup}")
        assert remote["steps"][0]["requires_approval"] is True

        result = await session.call_tool("saga_rollback", {"sagaId": sid})
        assert not result.is_error, text(result)
        assert result.structured_content["status"] == "COMPENSATING"
        assert result.structured_content["awaitingApproval"] == ["step-1"]
        assert "approval" in text(result) and f"{url}/approvals/" in text(result)
        assert result.structured_content["decideAt"] == f"{url}/approvals/"
        page = result.structured_content["sagaPage"]
        assert page.startswith(f"{url}/sagas/") and page in text(result)
        assert "not in this chat" in text(result)
        # this client declares no elicitation: the commands are listed, nothing ran unasked
        assert f"undo command: rm -f {backup}" in text(result)
        assert "Nothing has been undone yet" in text(result)
        assert backup.exists()

        # the worker's logic: the undo waits for approval; an approver rejects it
        monkeypatch.setenv("SAGABOARD_ALLOW_COMMAND_UNDOS", "1")
        done = json.loads(manage(db, "shell", "-c", f"SID = {sid!r}\n{WORKER}").splitlines()[-1])
        assert done["first"] == "COMPENSATING"
        assert done["pending"] == [["step-1", f"rm -f {backup}"]]
        assert done["approvals"] == ["REJECTED"]
        assert backup.exists(), "a rejected undo never runs"

        status = await call(session, "saga_status", sagaId=sid)
        states = {s["stepId"]: (s["state"], s["where"]) for s in status["steps"]}
        assert states["step-1"][0] == "REJECTED"
        assert "rejected" in states["step-1"][1]
        assert states["step-2"][0] == "FAILED"
        assert status["status"] == done["then"]
        listed = await call(session, "saga_list_steps", sagaId=sid)
        assert listed["steps"][0]["undoCommand"] == f"rm -f {backup}"
        assert listed["steps"][0]["decisionNote"] == "keep the backup"

        # a bad id is a tool error, and the server keeps answering
        bad = await session.call_tool("saga_status", {"sagaId": "nope"})
        assert bad.is_error and "not found" in text(bad)
        assert (await call(session, "saga_status", sagaId=sid))["sagaId"] == sid

"""Shell-command undos: what the approver reads is what runs, and it runs fenced in.

No shell, a fixed directory, an environment of PATH and LANG only, output capped,
the whole process group killed on timeout, and a plan that changed after approval
refused (or the approval voided, when the change is seen first).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.actions.services import runner
from sagaboard.approvals.services import approvals
from sagaboard.engine.services.undo_kinds import COMMAND_ENV, OUTPUT_CAP, plan_for, plan_hash
from sagaboard.models import Approval, AuditEntry, Event, Project, Saga, Step
from sagaboard.record.services import manual_flow
from tests.support.agent_runs import storebot_events
from tests.support.hitl import one_step_saga, person

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def commands_on(settings: Any, tmp_path: Path) -> Path:
    settings.SAGABOARD_ALLOW_COMMAND_UNDOS = True
    settings.SAGABOARD_UNDO_TIMEOUT_SECONDS = 10
    settings.SAGABOARD_COMMAND_UNDO_CWD = tmp_path / "undo-here"
    return tmp_path


def command_saga(project: Project, command: str, saga_id: str = "c-1") -> Saga:
    """A saga whose one step has this command as its undo, rolling back."""
    return one_step_saga(project, {"kind": "command", "command": command}, saga_id)


def approve(saga: Saga, name: str = "ann") -> None:
    approval = Approval.objects.get(saga=saga, status="PENDING")
    approvals.approval_decide(
        approval_id=approval.pk, user=person(name, "approver", saga.project),
        decision="approve", reason="read it, it is right",
    )  # fmt: skip


def run_approved(saga: Saga) -> str:
    """Ask (an approval opens), approve, run: the status the rollback ends in."""
    assert runner.rollback_continue(saga.pk) == "COMPENSATING"
    approve(saga)
    return runner.rollback_continue(saga.pk)


def output_of(saga: Saga) -> str:
    return Event.objects.get(saga=saga, kind="undo.output").detail or ""


def error_of(saga: Saga) -> str:
    return Step.objects.get(saga=saga).error or ""


def test_the_command_gets_path_and_lang_and_nothing_of_the_workers_environment(
    shop: Project, commands_on: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://u:db-password@db/x")
    monkeypatch.setenv("SAGABOARD_SECRET_KEY", "k" * 50)
    monkeypatch.setenv("SAGABOARD_WEBHOOK_SECRET", "whsec-do-not-leak")
    saga = command_saga(shop, "env")
    assert run_approved(saga) == "ROLLED_BACK"
    assert sorted(output_of(saga).splitlines()) == ["LANG=C.UTF-8", "PATH=/usr/bin:/bin"]


def test_the_command_runs_in_the_fixed_directory_made_private(
    shop: Project, commands_on: Path
) -> None:
    saga = command_saga(shop, "pwd")
    assert run_approved(saga) == "ROLLED_BACK"
    where = commands_on / "undo-here"
    assert output_of(saga) == f"{where}\n"
    assert where.stat().st_mode & 0o777 == 0o700


def test_shell_metacharacters_stay_arguments(shop: Project, commands_on: Path) -> None:
    canary = commands_on / "canary"
    canary.write_text("still here")
    made = [commands_on / f"made-{n}" for n in range(4)]
    command = (
        f"echo hi ; rm -rf {canary} && touch {made[0]} | cat > {made[1]} "
        f"$(touch {made[2]}) `touch {made[3]}` $HOME *"
    )
    saga = command_saga(shop, command)
    assert run_approved(saga) == "ROLLED_BACK"
    assert canary.read_text() == "still here"
    assert not any(m.exists() for m in made)
    assert output_of(saga) == " ".join(command.split()[1:]) + "\n"  # echo saw them literally


def test_output_is_capped_with_a_marker(shop: Project, commands_on: Path) -> None:
    saga = command_saga(shop, "seq 1 300000")  # about 2 MB
    assert run_approved(saga) == "ROLLED_BACK"
    text = output_of(saga)
    assert text.startswith("1\n2\n3\n")
    kept, marker = text.rsplit("\n[output truncated: ", 1)
    assert len(kept.encode()) == OUTPUT_CAP
    dropped = int(marker.split()[0])
    assert dropped == len("".join(f"{n}\n" for n in range(1, 300001))) - OUTPUT_CAP


@pytest.mark.slow  # waits for a timeout
def test_an_endless_output_is_read_in_bounded_memory_until_the_timeout(
    shop: Project, commands_on: Path, settings: Any
) -> None:
    settings.SAGABOARD_UNDO_TIMEOUT_SECONDS = 1
    saga = command_saga(shop, "yes")
    assert run_approved(saga) == "ROLLBACK_FAILED"
    assert "timed out after 1 s" in error_of(saga)


@pytest.mark.slow  # waits for a timeout
def test_a_timeout_kills_the_whole_process_group(
    shop: Project, commands_on: Path, settings: Any
) -> None:
    settings.SAGABOARD_UNDO_TIMEOUT_SECONDS = 1
    saga = command_saga(shop, "sh -c 'sleep 300 & echo child=$!; sleep 300'")
    started = time.monotonic()
    assert run_approved(saga) == "ROLLBACK_FAILED"
    assert time.monotonic() - started < 30
    error = error_of(saga)
    assert "timed out after 1 s (killed with its process group)" in error
    child = int(re.search(r"child=(\d+)", error)[1])  # type: ignore[index]
    assert not alive(child)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper has been killed already)."""
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state == "Z":
            return False
        time.sleep(0.1)
    return True


def test_a_command_changed_after_approval_is_refused_audited_and_asked_again(
    shop: Project, commands_on: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker loaded the changed step, the gate then saw the approved one (a race):
    the worker hashes what it is about to run and refuses."""
    ran = commands_on / "ran"
    approved = f"echo {ran}"
    saga = command_saga(shop, approved)
    assert runner.rollback_continue(saga.pk) == "COMPENSATING"
    approve(saga)
    step = Step.objects.get(saga=saga)
    Step.objects.filter(pk=step.pk).update(undo={"kind": "command", "command": f"touch {ran}"})
    gate_ask = runner.ServerGate.approve_compensation

    def change_back_first(self: Any, request: Any) -> Any:
        Step.objects.filter(pk=step.pk).update(undo={"kind": "command", "command": approved})
        return gate_ask(self, request)

    monkeypatch.setattr(runner.ServerGate, "approve_compensation", change_back_first)
    assert runner.rollback_continue(saga.pk) == "ROLLBACK_FAILED"
    assert not ran.exists()
    assert "refused: what would run" in error_of(saga) and "not what was approved" in error_of(saga)
    refused = AuditEntry.objects.get(action="undo.refused")
    assert refused.actor == "worker" and "not what was approved" in refused.reason


def test_a_changed_command_voids_the_approval_and_nothing_runs(
    shop: Project, commands_on: Path
) -> None:
    ran = commands_on / "ran"
    saga = command_saga(shop, "echo fine")
    assert runner.rollback_continue(saga.pk) == "COMPENSATING"
    approve(saga)
    step = Step.objects.get(saga=saga)
    Step.objects.filter(pk=step.pk).update(undo={"kind": "command", "command": f"touch {ran}"})
    assert runner.rollback_continue(saga.pk) == "COMPENSATING"  # waits for a new decision
    assert not ran.exists()
    old, new = Approval.objects.filter(saga=saga).order_by("pk")
    assert old.status == "VOID" and "changed after approval" in old.decided_reason
    assert new.status == "PENDING" and new.plan["argv"] == ["touch", str(ran)]


def test_an_operators_retry_reruns_only_what_was_approved(shop: Project, commands_on: Path) -> None:
    """The engine does not ask the gate on a retry: the worker's own check still holds."""
    saga = command_saga(shop, "false")
    assert run_approved(saga) == "ROLLBACK_FAILED"
    step = Step.objects.get(saga=saga)
    ran = commands_on / "ran"
    Step.objects.filter(pk=step.pk).update(undo={"kind": "command", "command": f"touch {ran}"})
    Step.objects.filter(pk=step.pk).update(pending_action={"action": "retry", "by": "user:op"})
    runner.step_action_run(step.pk)
    assert not ran.exists()
    # The retry waits for a person to approve what would run now (no attempt made).
    assert AuditEntry.objects.filter(action="step.retry_waits").exists()
    assert step.attempts.count() == 1
    pending = Approval.objects.get(saga=saga, status="PENDING")
    assert pending.plan["argv"] == ["touch", str(ran)]  # a person must approve the new one


def test_the_agent_cannot_repost_a_step_with_another_command(
    shop: Project, commands_on: Path
) -> None:
    token = token_create(project=shop, label="agent").secret
    client = Client(headers={"authorization": f"Bearer {token}"})

    def post(path: str, body: dict[str, Any]) -> Any:
        return client.post(f"/api/v1{path}", json.dumps(body), content_type="application/json")

    post("/sagas", {"event_id": "b", "name": "ops", "id": "s-1"})
    first = {"event_id": "s1", "tool_name": "t", "undo": {"kind": "command", "command": "true"}}
    assert post("/sagas/s-1/steps", first).status_code == 201
    again = {**first, "undo": {"kind": "command", "command": "rm -rf /"}}
    answer = post("/sagas/s-1/steps", again)
    assert answer.status_code == 409 and answer.json()["error"]["field"] == "event_id"
    assert Step.objects.get().undo["command"] == "true"


@pytest.mark.parametrize(
    ("command", "reason"),
    [("echo 'unclosed", "cannot be split"), ("   ", "is empty"), ("echo a\x00b", "NUL")],
)
def test_a_command_that_cannot_run_is_refused_when_posted(
    shop: Project, command: str, reason: str
) -> None:
    token = token_create(project=shop, label="agent").secret
    client = Client(headers={"authorization": f"Bearer {token}"})
    body = {"event_id": "b", "name": "ops", "id": "s-1"}
    client.post("/api/v1/sagas", json.dumps(body), content_type="application/json")
    step = {"event_id": "s1", "tool_name": "t", "undo": {"kind": "command", "command": command}}
    answer = client.post(
        "/api/v1/sagas/s-1/steps", json.dumps(step), content_type="application/json"
    )
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "undo.command"
    assert reason in answer.json()["error"]["message"]
    assert not Step.objects.exists()


def test_the_approver_reads_the_exact_command_escaped_in_the_queue_and_on_the_saga_page(
    shop: Project, commands_on: Path
) -> None:
    command = """echo "<script>alert(1)</script>" '&amp;' ; rm -rf /"""
    saga = command_saga(shop, command)
    assert runner.rollback_continue(saga.pk) == "COMPENSATING"
    client = Client()
    client.force_login(person("ann", "approver", shop))
    escaped = (
        "echo &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot; &#x27;&amp;amp;&#x27; ; rm -rf /"
    )
    for page in ("/approvals/", f"/sagas/shop/{saga.saga_id}/"):
        html = client.get(page).content.decode()
        assert f'<pre class="command">{escaped}</pre>' in html, page
        assert "<script>alert(1)" not in html
        assert "<li><code>&lt;script&gt;alert(1)&lt;/script&gt;</code></li>" in html  # one arg
        assert "<code>;</code>" in html and str(commands_on / "undo-here") in html


def test_the_approval_binds_to_directory_and_environment_too(
    shop: Project, commands_on: Path, settings: Any
) -> None:
    saga = command_saga(shop, "true")
    step = Step.objects.get(saga=saga)
    before = plan_hash(plan_for(saga, step))
    settings.SAGABOARD_COMMAND_UNDO_CWD = commands_on / "elsewhere"
    assert plan_hash(plan_for(saga, step)) != before
    assert plan_for(saga, step)["env"] == COMMAND_ENV and "HOME" not in COMMAND_ENV


def test_transition_events_cannot_rewrite_a_saga_sagaboard_runs(shop: Project) -> None:
    """The events API is for sagas agents run; a server-run saga's steps (what approvers
    approve) change only through the manual-flow API."""
    token = token_create(project=shop, label="agent").secret
    manual_flow.saga_begin(project=shop, event_id="b", name="ops", saga_id="s-1")
    events = storebot_events("s-1")[1:4]  # steps added and completed, as an agent would send
    answer = Client(headers={"authorization": f"Bearer {token}"}).post(
        "/api/v1/events", json.dumps({"events": events}), content_type="application/json"
    )
    assert answer.status_code == 409
    assert answer.json()["error"]["field"] == "saga.id" and "run by sagaboard" in answer.text
    assert not Step.objects.exists() and Saga.objects.get().seq == 1

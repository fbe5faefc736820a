"""API v1, decisions: an agent asks for approvals and waits for operators, never decides itself."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test import Client

from sagaboard.access.services.roles import roles_sync
from sagaboard.access.services.tokens import token_create
from sagaboard.actions.services import operator_actions
from sagaboard.approvals.services import approvals
from sagaboard.engine.services.undo_kinds import plan_for, plan_hash
from sagaboard.models import Approval, ApprovalPolicy, AuditEntry, Project, Step
from tests.support.agent_runs import paused_storebot_events as storebot_run
from tests.support.hitl import person, storebot_server_saga

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def other() -> Project:
    return Project.objects.create(slug="other", name="Other")


class Api:
    def __init__(self, client: Client, token: str | None) -> None:
        self.client, self.token = client, token

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def post(self, path: str, body: Any, raw: bool = False) -> Any:
        data = body if raw else json.dumps(body)
        return self.client.post(
            f"/api/v1{path}", data, content_type="application/json", headers=self._headers()
        )

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(f"/api/v1{path}", params, headers=self._headers())


@pytest.fixture
def api(client: Client, shop: Project) -> Api:
    return Api(client, token_create(project=shop, label="storebot").secret)


@pytest.fixture
def outsider(client: Client, other: Project) -> Api:
    return Api(client, token_create(project=other, label="elsewhere").secret)


@pytest.fixture
def awaiting(api: Api) -> str:
    """A mirrored saga paused before refund_payment's undo (step-2 AWAITING_APPROVAL)."""
    response = api.post(
        "/events",
        {"events": storebot_run("agent-1", refund_approval=True, return_undo_fails=False)},
    )
    assert response.status_code == 200, response.content
    return "agent-1"


@pytest.fixture
def halted(api: Api) -> Step:
    """A mirrored saga halted on return_item's failed undo (step-1 ROLLBACK_FAILED)."""
    response = api.post(
        "/events",
        {"events": storebot_run("agent-2", refund_approval=False, return_undo_fails=True)},
    )
    assert response.status_code == 200, response.content
    step = Step.objects.get(saga__saga_id="agent-2", step_id="step-1")
    assert step.state == "ROLLBACK_FAILED" and step.saga.status == "ROLLBACK_FAILED"
    return step


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]  # type: ignore[no-any-return]


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


# ---------------------------------------------------------------- asking for approval


def test_asking_opens_one_pending_approval_bound_to_what_the_agent_will_undo(
    api: Api, awaiting: str
) -> None:
    response = api.post(f"/sagas/{awaiting}/steps/step-2/approval", {"why": "refunds need a human"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "PENDING" and body["required"] == 1
    assert body["why"] == "refunds need a human"
    assert body["decided_by"] == [] and body["decided_reason"] == ""
    assert body["saga_id"] == awaiting and body["step_id"] == "step-2"
    assert body["expires_at"] is None and body["created_at"]
    approval = Approval.objects.get(pk=body["id"])
    step = Step.objects.get(saga__saga_id=awaiting, step_id="step-2")
    assert approval.plan == {
        "kind": "client",
        "tool": "refund_payment",
        "input": {"amount": 120, "currency": "EUR"},
        "output": {"refund": "re_1"},
    }
    assert body["plan_hash"] == plan_hash(plan_for(step.saga, step))
    # Asking again (a retried request, a resumed rollback) gets the same approval.
    again = api.post(f"/sagas/{awaiting}/steps/step-2/approval", {})
    assert again.json()["id"] == body["id"]
    assert Approval.objects.count() == 1


def test_without_a_why_the_servers_reason_is_given(api: Api, awaiting: str) -> None:
    body = api.post(f"/sagas/{awaiting}/steps/step-2/approval", {}).json()
    assert body["why"] == "the tool or the step was declared as needing approval"
    empty = api.post(f"/sagas/{awaiting}/steps/step-2/approval", "", raw=True)  # no body at all
    assert empty.status_code == 200 and empty.json()["id"] == body["id"]


def test_a_policy_sets_how_many_approvers_and_for_how_long(api: Api, shop: Project) -> None:
    ApprovalPolicy.objects.create(
        project=shop, name="big refunds", tool_glob="refund_*", condition="input.amount > 100",
        approvers_required=2, timeout_seconds=3600,
    )  # fmt: skip
    api.post(
        "/events",
        {"events": storebot_run("agent-3", refund_approval=True, return_undo_fails=False)},
    )
    body = api.post("/sagas/agent-3/steps/step-2/approval", {}).json()
    assert body["required"] == 2 and body["expires_at"] is not None
    ann, bob = person("ann", "approver", shop), person("bob", "approver", shop)
    approvals.approval_decide(approval_id=body["id"], user=ann, decision="approve", reason="ok")
    half = api.get(f"/approvals/{body['id']}").json()
    assert half["status"] == "PENDING" and half["decided_by"] == ["ann"]
    approvals.approval_decide(approval_id=body["id"], user=bob, decision="approve", reason="yes")
    done = api.get(f"/approvals/{body['id']}").json()
    assert done["status"] == "APPROVED" and done["decided_by"] == ["ann", "bob"]
    assert done["decided_reason"] == "yes" and done["decided_at"]


# ---------------------------------------------------------------- waiting for a decision


def test_a_decided_approval_is_answered_at_once(api: Api, awaiting: str, shop: Project) -> None:
    asked = api.post(f"/sagas/{awaiting}/steps/step-2/approval", {}).json()
    ann = person("ann", "approver", shop)
    approvals.approval_decide(
        approval_id=asked["id"], user=ann, decision="approve", reason="the refund was wrong"
    )
    response, took = timed(lambda: api.get(f"/approvals/{asked['id']}", wait=30))
    assert response.status_code == 200 and took < 2
    body = response.json()
    assert body["status"] == "APPROVED"
    assert body["decided_by"] == ["ann"] and body["decided_reason"] == "the refund was wrong"


def test_a_rejection_names_who_rejected(api: Api, awaiting: str, shop: Project) -> None:
    asked = api.post(f"/sagas/{awaiting}/steps/step-2/approval", {}).json()
    rob = person("rob", "approver", shop)
    approvals.approval_decide(
        approval_id=asked["id"], user=rob, decision="reject", reason="keep the money"
    )
    body = api.get(f"/approvals/{asked['id']}").json()
    assert body["status"] == "REJECTED" and body["decided_by"] == ["rob"]
    assert body["decided_reason"] == "keep the money"


def test_a_pending_approval_is_answered_pending_after_the_wait(api: Api, awaiting: str) -> None:
    asked = api.post(f"/sagas/{awaiting}/steps/step-2/approval", {}).json()
    response, took = timed(lambda: api.get(f"/approvals/{asked['id']}", wait=0.6))
    assert response.status_code == 200 and response.json()["status"] == "PENDING"
    assert 0.55 <= took < 3
    response, took = timed(lambda: api.get(f"/approvals/{asked['id']}"))
    assert response.json()["status"] == "PENDING" and took < 1  # wait=0 answers at once


@pytest.mark.parametrize(
    ("wait", "field"), [("31", "wait"), ("-1", "wait"), ("soon", "wait"), ("nan", "wait")]
)
def test_a_bad_wait_is_refused_naming_the_field(
    api: Api, awaiting: str, wait: str, field: str
) -> None:
    asked = api.post(f"/sagas/{awaiting}/steps/step-2/approval", {}).json()
    for path in (f"/approvals/{asked['id']}", f"/sagas/{awaiting}/steps/step-2/decision"):
        response = api.get(path, wait=wait)
        assert response.status_code == 422, (path, response.content)
        error = error_of(response)
        assert error["code"] == "validation_error" and error["field"] == field


# ---------------------------------------------------------------- operators' actions


def test_nothing_decided_is_answered_null_after_the_wait(api: Api, halted: Step) -> None:
    response, took = timed(lambda: api.get("/sagas/agent-2/steps/step-1/decision", wait=0.5))
    assert response.status_code == 200, response.content
    assert response.json() == {
        "action": None, "by": None, "reason": None, "at": None, "state": "ROLLBACK_FAILED"
    }  # fmt: skip
    assert 0.45 <= took < 3


def test_an_operators_retry_is_answered_then_acknowledged_once(
    api: Api, halted: Step, shop: Project
) -> None:
    olga = person("olga", "operator", shop)
    operator_actions.step_act(
        step_pk=halted.pk, user=olga, action="retry", reason="upstream is back"
    )
    response, took = timed(lambda: api.get("/sagas/agent-2/steps/step-1/decision", wait=30))
    assert took < 2
    body = response.json()
    assert body["action"] == "retry" and body["by"] == "user:olga"
    assert body["reason"] == "upstream is back" and body["at"]

    path = "/sagas/agent-2/steps/step-1/decision/ack"
    wrong = api.post(path, {"action": "resolve"})
    assert wrong.status_code == 409 and error_of(wrong)["code"] == "not_pending"
    assert "retry by user:olga" in error_of(wrong)["message"]
    stale = api.post(path, {"action": "retry", "at": "2001-01-01T00:00:00+00:00"})
    assert stale.status_code == 409
    halted.refresh_from_db()
    assert halted.pending_action is not None  # refused acks changed nothing

    done = api.post(path, {"action": "retry", "at": body["at"]})
    assert done.status_code == 200, done.content
    assert done.json()["acknowledged"] == "retry" and done.json()["by"] == "user:olga"
    halted.refresh_from_db()
    assert halted.pending_action is None
    entry = AuditEntry.objects.get(action="step.retry.done")
    assert entry.actor.startswith("token:") and entry.data["requested_by"] == "user:olga"

    twice = api.post(path, {"action": "retry"})
    assert twice.status_code == 409 and "nothing to clear" in error_of(twice)["message"]
    after = api.get("/sagas/agent-2/steps/step-1/decision").json()
    assert after["action"] is None


def test_a_resolve_carries_the_operators_note(api: Api, halted: Step, shop: Project) -> None:
    olga = person("olga", "operator", shop)
    operator_actions.step_act(
        step_pk=halted.pk, user=olga, action="resolve", reason="restocked by hand"
    )
    body = api.get("/sagas/agent-2/steps/step-1/decision").json()
    assert (body["action"], body["by"], body["reason"]) == (
        "resolve", "user:olga", "restocked by hand"
    )  # fmt: skip
    ack = api.post("/sagas/agent-2/steps/step-1/decision/ack", {"action": "resolve"})
    assert ack.status_code == 200, ack.content


def test_leaving_a_step_failed_is_a_decision_with_nothing_to_acknowledge(
    api: Api, halted: Step, shop: Project
) -> None:
    olga = person("olga", "operator", shop)
    operator_actions.step_act(
        step_pk=halted.pk, user=olga, action="leave", reason="finance handles it"
    )
    body = api.get("/sagas/agent-2/steps/step-1/decision", wait=5).json()
    assert (body["action"], body["by"], body["reason"]) == (
        "leave", "user:olga", "finance handles it"
    )  # fmt: skip
    response = api.post("/sagas/agent-2/steps/step-1/decision/ack", {"action": "leave"})
    assert response.status_code == 422 and error_of(response)["field"] == "action"


def test_a_settled_step_is_answered_at_once(api: Api, halted: Step) -> None:
    # step-2 (refund_payment) was undone before step-1 failed: nobody can act on it.
    response, took = timed(lambda: api.get("/sagas/agent-2/steps/step-2/decision", wait=30))
    assert took < 2
    assert response.json()["action"] is None and response.json()["state"] == "ROLLED_BACK"


# ---------------------------------------------------------------- scoping and bad input


def test_another_projects_ids_are_not_found(
    api: Api, outsider: Api, awaiting: str, halted: Step
) -> None:
    asked = api.post(f"/sagas/{awaiting}/steps/step-2/approval", {}).json()
    for response in (
        outsider.post(f"/sagas/{awaiting}/steps/step-2/approval", {}),
        outsider.get(f"/approvals/{asked['id']}", wait=5),
        outsider.get("/sagas/agent-2/steps/step-1/decision", wait=5),
        outsider.post("/sagas/agent-2/steps/step-1/decision/ack", {"action": "retry"}),
    ):
        assert response.status_code == 404, response.content
        assert error_of(response)["code"] == "not_found"


def test_unknown_sagas_steps_and_approvals_name_the_field(api: Api, awaiting: str) -> None:
    cases = [
        (api.post("/sagas/nope/steps/step-2/approval", {}), "saga_id"),
        (api.post(f"/sagas/{awaiting}/steps/step-9/approval", {}), "step_id"),
        (api.get("/approvals/999999"), "approval_id"),
        (api.get(f"/sagas/{awaiting}/steps/step-9/decision"), "step_id"),
        (api.post("/sagas/nope/steps/step-1/decision/ack", {"action": "retry"}), "saga_id"),
    ]
    for response, field in cases:
        assert response.status_code == 404, response.content
        assert error_of(response)["field"] == field
    for bad in ("twelve", "99999999999999999999999", "9223372036854775808", "0"):
        response = api.get(f"/approvals/{bad}")  # not an id, or past the schema's bounds
        assert response.status_code == 422, (bad, response.content)
        assert error_of(response)["field"].endswith("approval_id")  # "path.approval_id"


def test_a_step_not_waiting_for_an_undo_cannot_be_approved(api: Api, awaiting: str) -> None:
    response = api.post(f"/sagas/{awaiting}/steps/step-3/approval", {})  # the FAILED label
    assert response.status_code == 409
    assert error_of(response)["code"] == "illegal_state"
    assert re.search(r"\bFAILED\b", error_of(response)["message"])  # not COMPENSATION_FAILED


def test_sagas_run_by_sagaboard_are_left_to_its_workers(api: Api, shop: Project) -> None:
    storebot_server_saga(shop, "server-1")
    for response in (
        api.post("/sagas/server-1/steps/step-2/approval", {}),
        api.get("/sagas/server-1/steps/step-1/decision"),
        api.post("/sagas/server-1/steps/step-1/decision/ack", {"action": "retry"}),
    ):
        assert response.status_code == 409, response.content
        assert error_of(response)["code"] == "server_driven"


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"why": "x" * 2001}, 422, "why"),
        ({"why": 7}, 422, "why"),
        ({"approve": True}, 422, "approve"),
        ("{not json", 400, None),
    ],
)
def test_bad_bodies_are_refused_naming_the_field(
    api: Api, awaiting: str, body: Any, status: int, field: str | None
) -> None:
    raw = isinstance(body, str)
    response = api.post(f"/sagas/{awaiting}/steps/step-2/approval", body, raw=raw)
    assert response.status_code == status, response.content
    assert error_of(response).get("field") == field
    assert not Approval.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [({}, "action"), ({"action": "approve"}, "action"), ({"action": 1}, "action")],
)
def test_bad_acknowledgements_are_refused(api: Api, halted: Step, body: Any, field: str) -> None:
    response = api.post("/sagas/agent-2/steps/step-1/decision/ack", body)
    assert response.status_code == 422 and error_of(response)["field"] == field


def test_a_token_is_required(client: Client, awaiting: str) -> None:
    anonymous = Api(client, None)
    assert anonymous.post(f"/sagas/{awaiting}/steps/step-2/approval", {}).status_code == 401
    assert anonymous.get("/approvals/1").status_code == 401
    assert anonymous.get(f"/sagas/{awaiting}/steps/step-2/decision").status_code == 401


def test_there_is_no_way_to_approve_with_a_token(api: Api, awaiting: str) -> None:
    asked = api.post(f"/sagas/{awaiting}/steps/step-2/approval", {}).json()
    for path in (f"/approvals/{asked['id']}", f"/approvals/{asked['id']}/approve"):
        response = api.post(path, {"decision": "approve", "reason": "self-service"})
        assert response.status_code in (404, 405)
    assert Approval.objects.get(pk=asked["id"]).status == "PENDING"


# ---------------------------------------------------------------- long-polls answered live


def later(seconds: float, action: Callable[[], Any]) -> threading.Thread:
    """Run ``action`` in another thread (its own database connection) after ``seconds``."""

    def run() -> None:
        try:
            time.sleep(seconds)
            action()
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_waiting_agent_hears_an_approval_given_meanwhile(api: Api, shop: Project) -> None:
    roles_sync(Group, Permission)  # transactional tests flush what migrations created
    api.post(
        "/events",
        {"events": storebot_run("live-1", refund_approval=True, return_undo_fails=False)},
    )
    asked = api.post("/sagas/live-1/steps/step-2/approval", {}).json()
    ann = person("ann", "approver", shop)
    thread = later(
        0.5,
        lambda: approvals.approval_decide(
            approval_id=asked["id"], user=ann, decision="approve", reason="go ahead"
        ),
    )
    response, took = timed(lambda: api.get(f"/approvals/{asked['id']}", wait=20))
    thread.join(10)
    assert response.status_code == 200
    assert response.json()["status"] == "APPROVED" and response.json()["decided_by"] == ["ann"]
    assert 0.4 <= took < 5, took


@pytest.mark.django_db(transaction=True)
def test_a_waiting_agent_hears_an_operators_retry_given_meanwhile(api: Api, shop: Project) -> None:
    roles_sync(Group, Permission)
    api.post(
        "/events",
        {"events": storebot_run("live-2", refund_approval=False, return_undo_fails=True)},
    )
    step = Step.objects.get(saga__saga_id="live-2", step_id="step-1")
    olga = person("olga", "operator", shop)
    thread = later(
        0.5,
        lambda: operator_actions.step_act(step_pk=step.pk, user=olga, action="retry", reason=""),
    )
    response, took = timed(lambda: api.get("/sagas/live-2/steps/step-1/decision", wait=20))
    thread.join(10)
    assert response.json()["action"] == "retry" and response.json()["by"] == "user:olga"
    assert 0.4 <= took < 5, took


def test_the_approval_rule_reports_the_projects_policies(
    api: Api, awaiting: str, shop: Project, outsider: Api
) -> None:
    path = f"/sagas/{awaiting}/steps/step-1/approval-rule"
    assert api.get(path).json() == {"needed": False, "why": None}
    ApprovalPolicy.objects.create(project=shop, name="returns", tool_glob="return_*")
    assert api.get(path).json() == {"needed": True, "why": "policy 'returns' (v1) matched"}
    assert outsider.get(path).status_code == 404

"""API v1, driving a saga by hand (the seed's MCP tools): begin, add, complete, fail, roll back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.models import ApiRequest, AuditEntry, Event, Project, Saga

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]


@pytest.fixture
def project() -> Project:
    return Project.objects.create(slug="ops", name="Ops")


@pytest.fixture
def call(client: Client, project: Project) -> Any:
    token = token_create(project=project, label="mcp").secret
    counter = iter(range(10**6))

    def call(method: str, path: str, body: dict[str, Any] | None = None, **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {kw.pop('auth', token)}"}
        if method == "get":
            return client.get(f"/api/v1{path}", headers=headers)
        body = dict(body or {})
        body.setdefault("event_id", f"ev-{next(counter)}")
        return client.post(
            f"/api/v1{path}", json.dumps(body), content_type="application/json", headers=headers
        )

    return call


def begin(call: Any, **body: Any) -> str:
    response = call("post", "/sagas", {"name": "checkout-flow", **body})
    assert response.status_code == 201, response.content
    return response.json()["id"]  # type: ignore[no-any-return]


def test_the_seeds_walkthrough_ends_compensating_with_the_plan_in_order(
    call: Any, settings: Any
) -> None:
    settings.SAGABOARD_ALLOW_COMMAND_UNDOS = True
    saga_id = begin(call)
    assert call("get", f"/sagas/{saga_id}").json()["status"] == "IN_PROGRESS"
    backup = call(
        "post",
        f"/sagas/{saga_id}/steps",
        {
            "tool_name": "create_backup",
            "input": {"file": "backup.json"},
            "undo": {"kind": "command", "command": "rm -f backup.json"},
        },
    ).json()
    assert backup["id"] == "step-1" and backup["state"] == "PENDING"
    assert backup["undo"] == {"kind": "command", "command": "rm -f backup.json", "args": {}}
    assert backup["requires_approval"] is True  # shell undos always need a human
    call("post", f"/sagas/{saga_id}/steps/step-1/complete", {"output": {"bytes": 42}})
    call("post", f"/sagas/{saga_id}/steps", {"tool_name": "charge", "undo": {"kind": "none"}})
    call("post", f"/sagas/{saga_id}/steps/step-2/complete")
    call("post", f"/sagas/{saga_id}/steps", {"tool_name": "ship"})
    failed = call("post", f"/sagas/{saga_id}/steps/step-3/fail", {"error": "shipping API down"})
    assert failed.json()["state"] == "FAILED" and failed.json()["error"] == "shipping API down"

    response = call("post", f"/sagas/{saga_id}/rollback", {"reason": "order cancelled"})
    assert response.status_code == 202
    saga = response.json()
    assert saga["status"] == "COMPENSATING" and saga["driver"] == "server"
    assert [(s["id"], s["state"], s["has_undo"]) for s in saga["steps"]] == [
        ("step-1", "COMPLETED", True),
        ("step-2", "COMPLETED", False),
        ("step-3", "FAILED", False),  # added without an undo
    ]
    assert saga["steps"][0]["output"] == {"bytes": 42}


def test_a_retried_call_is_applied_once_and_answers_the_same(call: Any) -> None:
    saga_id = begin(call)
    body = {"event_id": "add-1", "tool_name": "t", "input": 1}
    first = call("post", f"/sagas/{saga_id}/steps", body)
    again = call("post", f"/sagas/{saga_id}/steps", body)
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"] == "step-1"
    assert len(call("get", f"/sagas/{saga_id}").json()["steps"]) == 1
    reused = call("post", f"/sagas/{saga_id}/steps", {**body, "input": 2})
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "conflict"


def test_completing_twice_and_acting_on_an_ended_saga_are_refused(call: Any) -> None:
    saga_id = begin(call)
    call("post", f"/sagas/{saga_id}/steps", {"tool_name": "t"})
    assert call("post", f"/sagas/{saga_id}/steps/step-1/complete").status_code == 200
    twice = call("post", f"/sagas/{saga_id}/steps/step-1/complete")
    assert twice.status_code == 409
    assert twice.json()["error"]["code"] == "illegal_transition"
    assert "COMPLETED to COMPLETED" in twice.json()["error"]["message"]
    assert call("post", f"/sagas/{saga_id}/complete").json()["status"] == "COMPLETED"
    late = call("post", f"/sagas/{saga_id}/steps", {"tool_name": "t2"})
    assert late.status_code == 409 and "refused" in late.json()["error"]["message"]
    assert call("post", f"/sagas/{saga_id}/steps/step-9/complete").status_code == 404


def test_a_refused_call_changes_nothing(call: Any) -> None:
    saga_id = begin(call)
    call("post", f"/sagas/{saga_id}/steps", {"tool_name": "t"})
    events = Event.objects.count()
    requests = ApiRequest.objects.count()
    assert call("post", f"/sagas/{saga_id}/steps/step-1/fail", {"error": ""}).status_code == 422
    call("post", f"/sagas/{saga_id}/complete")  # refused: step-1 is PENDING
    assert Event.objects.count() == events and ApiRequest.objects.count() == requests
    assert Saga.objects.get(saga_id=saga_id).status == "IN_PROGRESS"


def test_rollback_fails_steps_never_completed_and_cannot_repeat(call: Any) -> None:
    saga_id = begin(call)
    call("post", f"/sagas/{saga_id}/steps", {"tool_name": "t"})
    saga = call("post", f"/sagas/{saga_id}/rollback").json()
    assert saga["steps"][0]["state"] == "FAILED"
    again = call("post", f"/sagas/{saga_id}/rollback")
    assert again.status_code == 409 and again.json()["error"]["code"] == "illegal_transition"


def test_ids_of_other_projects_and_unknown_sagas_are_404(call: Any) -> None:
    saga_id = begin(call)
    other = token_create(project=Project.objects.create(slug="x", name="X"), label="x").secret
    assert call("get", f"/sagas/{saga_id}", auth=other).status_code == 404
    assert (
        call("post", f"/sagas/{saga_id}/steps", {"tool_name": "t"}, auth=other).status_code == 404
    )
    assert call("post", "/sagas/nope/rollback").status_code == 404


def test_beginning_a_saga_with_an_existing_id_is_a_conflict(call: Any) -> None:
    begin(call, id="fixed-id")
    response = call("post", "/sagas", {"name": "again", "id": "fixed-id"})
    assert response.status_code == 409 and response.json()["error"]["field"] == "id"


def test_a_mirrored_saga_cannot_be_driven_by_hand(call: Any, project: Project) -> None:
    saga_id = begin(call)
    Saga.objects.filter(saga_id=saga_id).update(driver=Saga.Driver.CLIENT)
    response = call("post", f"/sagas/{saga_id}/steps", {"tool_name": "t"})
    assert (
        response.status_code == 409 and "transition events" in response.json()["error"]["message"]
    )


def test_token_creation_and_revocation_are_audited(project: Project) -> None:
    from sagaboard.access.services.tokens import token_revoke

    minted = token_create(project=project, label="bot")
    token_revoke(token=minted.token, reason="leaked in a log")
    actions = list(AuditEntry.objects.order_by("at").values_list("action", "reason"))
    assert actions == [("token.create", ""), ("token.revoke", "leaked in a log")]
    assert minted.secret not in json.dumps(list(AuditEntry.objects.values("data", "target")))
    assert minted.token.secret_hash != minted.secret and minted.secret.startswith("sgb_")

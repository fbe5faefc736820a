"""The compensation plan comes from the code that runs the undos (``undo_kinds.undo_check``):
an undo that cannot run here is refused when its step is added, and for sagas already stored
the plan and the approval queue say "cannot run here: <why>" before anyone approves."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.actions.services import operator_actions, runner, work_queues
from sagaboard.models import Project, Saga, Step
from tests.support.hitl import person, storebot_server_saga

pytestmark = pytest.mark.django_db

CLIENT_UNDO = "a 'client' undo runs in the agent's own process, but sagaboard runs this saga"
AGENT_GONE = "the undo of 'return_item' lives in the agent's process, and no agent holds this saga"


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def agent(shop: Project) -> Client:
    token = token_create(project=shop, label="agent").secret
    return Client(headers={"authorization": f"Bearer {token}"})


def post(agent: Client, path: str, body: dict[str, Any]) -> Any:
    return agent.post(f"/api/v1{path}", json.dumps(body), content_type="application/json")


@pytest.mark.parametrize(
    ("undo", "field", "says"),
    [
        ({"kind": "client"}, "undo.kind", CLIENT_UNDO),
        ({"kind": "handler"}, "undo.handler", "needs the handler's name"),
        ({"kind": "handler", "handler": "nope.never"}, "undo.handler",
         "no compensation 'nope.never' is registered"),
        ({"kind": "webhook"}, "undo.url", "needs an http:// or https:// URL"),
        ({"kind": "webhook", "url": "javascript:alert(1)"}, "undo.url", "http:// or https://"),
        ({"kind": "command", "command": "rm -f backup.json"}, "undo.kind",
         "command undos are off on this server (SAGABOARD_ALLOW_COMMAND_UNDOS=0)"),
    ],
)  # fmt: skip
def test_it_refuses_a_step_whose_undo_cannot_run_here_naming_why_and_the_field(
    shop: Project, agent: Client, undo: dict[str, Any], field: str, says: str
) -> None:
    assert post(agent, "/sagas", {"event_id": "b", "name": "ops", "id": "s-1"}).status_code == 201
    answer = post(agent, "/sagas/s-1/steps", {"event_id": "a", "tool_name": "t", "undo": undo})
    assert answer.status_code == 422, answer.content
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("cannot_run_here", field)
    assert says in error["message"]
    assert not Step.objects.exists()  # nothing half-applied
    fixed = {"event_id": "a", "tool_name": "t", "undo": {"kind": "none"}}
    assert post(agent, "/sagas/s-1/steps", fixed).status_code == 201  # the id is free


def test_a_step_whose_undo_can_run_is_added(shop: Project, agent: Client, settings: Any) -> None:
    settings.SAGABOARD_ALLOW_COMMAND_UNDOS = True
    post(agent, "/sagas", {"event_id": "b", "name": "ops", "id": "s-1"})
    for n, undo in enumerate(
        [
            {"kind": "handler", "handler": "storebot.refund_payment"},
            {"kind": "webhook", "url": "https://hooks.example/undo"},
            {"kind": "command", "command": "rm -f backup.json"},
            {"kind": "none"},
        ]
    ):
        body = {"event_id": f"a{n}", "tool_name": "t", "undo": undo}
        assert post(agent, "/sagas/s-1/steps", body).status_code == 201


def stored_with_a_client_undo(shop: Project, saga_id: str, **options: Any) -> Saga:
    """StoreBot run by sagaboard whose return_item has a 'client' undo: stored before such a
    step was refused (the API now refuses it), so only the database can make one."""
    saga = storebot_server_saga(shop, saga_id, **options)
    Step.objects.filter(saga=saga, tool_name="return_item").update(undo={"kind": "client"})
    return saga


def test_the_plan_of_a_stored_saga_says_an_undo_cannot_run_here_before_anyone_approves(
    shop: Project,
) -> None:
    saga = stored_with_a_client_undo(shop, "p-1")
    plan = {item["step"].step_id: item for item in work_queues.compensation_plan(saga)}
    assert plan["step-1"]["what"].startswith(f"waits for an operator: {AGENT_GONE}")
    assert plan["step-1"]["cannot_run"] and not plan["step-2"]["cannot_run"]
    assert "will run unattended" not in plan["step-1"]["what"]
    viewer = Client()
    viewer.force_login(person("vic", "viewer", shop))
    html = viewer.get("/sagas/shop/p-1/").content.decode()
    assert re.search(r'<li class="cannot-run"><strong>step-1 · return_item</strong> — waits '
                     r"for an operator: the undo of &#x27;return_item&#x27; lives in the agent",
                     html)  # fmt: skip


def test_the_approval_queue_says_the_undo_cannot_run_and_so_does_the_approve_button(
    shop: Project,
) -> None:
    saga = storebot_server_saga(shop, "q-1")
    Step.objects.filter(saga=saga, tool_name="refund_payment").update(undo={"kind": "client"})
    assert runner.rollback_continue(saga.pk) == "COMPENSATING"  # the refund waits for a person
    ann = Client()
    ann.force_login(person("ann", "approver", shop))
    html = ann.get("/approvals/").content.decode()
    gone = "the undo of 'refund_payment' lives in the agent's process, and no agent holds"
    assert f"Cannot run here: {gone}".replace("'", "&#x27;") in html
    assert "Approve (it cannot run here: it will fail)" in html


def test_force_resolving_the_failed_undo_ends_where_the_plan_said_it_would(
    shop: Project,
) -> None:
    """The issue's scenario: the plan said "step-1 return_item - will run unattended", and
    after the operator force-resolved step-2 the undo failed at once ("has no undo")."""
    saga = stored_with_a_client_undo(shop, "fr-1", refund_needs_approval=False)
    Step.objects.filter(saga=saga, tool_name="refund_payment").update(
        undo={"kind": "handler", "handler": "storebot.refund_payment", "args": {"fail_first": 9}}
    )
    assert runner.rollback_continue(saga.pk) == "ROLLBACK_FAILED"
    said = {i["step"].step_id: i["what"] for i in work_queues.compensation_plan(saga)}
    assert said["step-1"].startswith(f"waits for an operator: {AGENT_GONE}")  # before anyone acts

    step2 = Step.objects.get(saga=saga, step_id="step-2")
    olga = person("olga", "operator", shop)
    operator_actions.step_act(
        step_pk=step2.pk, user=olga, action="resolve", reason="done in Stripe"
    )
    runner.step_action_run(step2.pk)  # what the worker's task does once the request commits

    step1 = Step.objects.get(saga=saga, step_id="step-1")
    assert Step.objects.get(pk=step2.pk).state == "RESOLVED"
    assert step1.state == "ROLLBACK_FAILED"
    assert (step1.error or "").startswith(f"not run: {AGENT_GONE}")
    assert step1.traceback is None  # a reason in words: nothing ran, nothing raised
    assert "has no undo" not in (step1.error or "")
    saga.refresh_from_db()
    assert saga.status == "ROLLBACK_FAILED" and saga.waiting_for == "OPERATOR"

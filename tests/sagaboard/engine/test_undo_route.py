"""Who runs an undo, and what then happens (``undo_kinds.undo_route``): one answer for the
plan, the worker, stop, retry and force-resolve (issue: a stop or a force-resolve on the demo
ended in a false ROLLBACK_FAILED, "a 'none' undo does not run in sagaboard")."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.actions.services import operator_actions, runner, saga_stop, work_queues
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.engine.services.undo_kinds import UndoRunner, undo_route, undo_runner
from sagaboard.models import Project, Saga, Step
from tests.support.hitl import person
from undo_core import RollbackRequestedError, define_tool
from undo_core import Saga as EngineSaga

pytestmark = pytest.mark.django_db

RESERVE = define_tool("deduct_inventory", lambda inp: {"reserved": True}, lambda out: None)
EMAIL = define_tool("send_email", lambda inp: {"sent": True})  # no undo


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def engine_saga_left_running(shop: Project, saga_id: str = "running") -> Saga:
    """What the demo's loader leaves: an engine saga run in its own (now gone) process."""
    engine = EngineSaga("checkout-flow", saga_id=saga_id, store=DjangoStore(shop))
    engine.execute(RESERVE, {"sku": "xyz"})
    engine.execute(EMAIL, {"to": "ada@example.com"})
    engine.release()
    return Saga.objects.get(project=shop, saga_id=saga_id)


def plan_of(saga: Saga) -> dict[str, str]:
    return {i["step"].tool_name: str(i["what"]) for i in work_queues.compensation_plan(saga)}


@pytest.mark.parametrize(
    ("has_undo", "undo", "runner_is"),
    [
        (False, {"kind": "handler", "handler": "x"}, UndoRunner.NOTHING),
        (False, {}, UndoRunner.NOTHING),
        (True, {"kind": "handler", "handler": "x"}, UndoRunner.SAGABOARD),
        (True, {"kind": "webhook", "url": "https://x"}, UndoRunner.SAGABOARD),
        (True, {"kind": "command", "command": "true"}, UndoRunner.SAGABOARD),
        (True, {"kind": "client"}, UndoRunner.AGENT),
        (True, {}, UndoRunner.AGENT),  # stored before the three cases were told apart
        (True, {"kind": "none"}, UndoRunner.AGENT),  # ambiguous: never read as "done"
        (True, None, UndoRunner.AGENT),
    ],
)
def test_each_step_is_one_of_three_cases_and_an_ambiguous_none_reads_as_the_agents(
    has_undo: bool, undo: Any, runner_is: UndoRunner
) -> None:
    assert undo_runner(has_undo, undo) is runner_is


def test_the_engine_store_records_an_in_process_undo_as_the_agents_never_as_none(
    shop: Project,
) -> None:
    saga = engine_saga_left_running(shop)
    undos = {s.tool_name: s.undo for s in saga.steps.all()}
    assert undos == {"deduct_inventory": {"kind": "client"}, "send_email": {"kind": "none"}}


def test_the_plan_says_before_anyone_clicks_what_a_stop_will_then_do(shop: Project) -> None:
    saga = engine_saga_left_running(shop)
    said = plan_of(saga)
    assert said["send_email"] == "nothing to undo: no undo declared, the side effect stays"
    assert said["deduct_inventory"].startswith(
        "waits for an operator: the undo of 'deduct_inventory' lives in the agent's process"
    )
    assert "will run unattended" not in " ".join(said.values())


def test_a_stop_of_a_saga_whose_agent_is_gone_waits_for_an_operator_in_words(
    shop: Project,
) -> None:
    saga = engine_saga_left_running(shop)
    olga = person("olga", "operator", shop)
    saga_stop.rollback_request(saga_pk=saga.pk, user=olga, reason="customer cancelled")
    assert runner.stop_run(saga.pk) == "ROLLBACK_FAILED"

    saga.refresh_from_db()
    assert (saga.status, saga.waiting_for) == ("ROLLBACK_FAILED", "OPERATOR")
    email = Step.objects.get(saga=saga, tool_name="send_email")
    reserve = Step.objects.get(saga=saga, tool_name="deduct_inventory")
    assert email.state == "COMPLETED" and email.error is None  # skipped, never a failed undo
    assert reserve.state == "ROLLBACK_FAILED"
    assert reserve.error.startswith("not run: the undo of 'deduct_inventory' lives in the agent")
    assert reserve.traceback is None
    assert "UndoKindError" not in (reserve.error_type or "")
    assert "force-resolve" in reserve.error


def test_a_retry_of_an_undo_nobody_here_can_run_is_refused_saying_the_ways_on(
    shop: Project,
) -> None:
    saga = engine_saga_left_running(shop)
    olga = person("olga", "operator", shop)
    saga_stop.rollback_request(saga_pk=saga.pk, user=olga, reason="customer cancelled")
    runner.stop_run(saga.pk)
    reserve = Step.objects.get(saga=saga, tool_name="deduct_inventory")
    with pytest.raises(DecisionRefused) as refused:
        operator_actions.step_act(step_pk=reserve.pk, user=olga, action="retry", reason="")
    assert refused.value.status == 409
    assert "lives in the agent's process" in refused.value.message
    assert Step.objects.get(pk=reserve.pk).pending_action is None  # nothing half-applied


def test_force_resolve_then_the_rollback_ends_rolled_back_with_the_exception_named(
    shop: Project,
) -> None:
    saga = engine_saga_left_running(shop)
    olga = person("olga", "operator", shop)
    saga_stop.rollback_request(saga_pk=saga.pk, user=olga, reason="customer cancelled")
    runner.stop_run(saga.pk)
    reserve = Step.objects.get(saga=saga, tool_name="deduct_inventory")
    operator_actions.step_act(
        step_pk=reserve.pk, user=olga, action="resolve", reason="stock put back by hand"
    )
    runner.step_action_run(reserve.pk)
    saga.refresh_from_db()
    assert saga.status == "ROLLED_BACK" and saga.waiting_for is None
    assert Step.objects.get(pk=reserve.pk).state == "RESOLVED"
    assert plan_of(saga)["deduct_inventory"] == "done: RESOLVED"


def test_an_agent_that_holds_its_saga_runs_its_own_undos(shop: Project) -> None:
    engine = EngineSaga("checkout-flow", saga_id="held", store=DjangoStore(shop))
    engine.execute(RESERVE, {"sku": "xyz"})  # the engine holds its lease until released
    saga = Saga.objects.get(project=shop, saga_id="held")
    step = saga.steps.get(tool_name="deduct_inventory")
    route = undo_route(saga, step)
    assert route.runner is UndoRunner.AGENT and route.agent_here and route.check
    assert plan_of(saga)["deduct_inventory"] == "runs in the agent: its own process undoes it"
    engine.release()
    saga.refresh_from_db()
    assert not undo_route(saga, saga.steps.get(tool_name="deduct_inventory")).check


def test_the_api_says_who_runs_each_undo(shop: Project) -> None:
    engine_saga_left_running(shop)
    token = token_create(project=shop, label="agent").secret
    agent = Client(headers={"authorization": f"Bearer {token}"})
    steps = agent.get("/api/v1/sagas/running").json()["steps"]
    assert {s["tool_name"]: s["undo_runner"] for s in steps} == {
        "deduct_inventory": "agent",
        "send_email": "nothing",
    }


def test_a_stop_reaches_an_engine_that_holds_its_saga_at_its_next_step(shop: Project) -> None:
    engine = EngineSaga("checkout-flow", saga_id="live", store=DjangoStore(shop))
    engine.execute(RESERVE, {"sku": "xyz"})
    saga = Saga.objects.get(project=shop, saga_id="live")
    olga = person("olga", "operator", shop)
    saga_stop.rollback_request(saga_pk=saga.pk, user=olga, reason="customer cancelled")
    # Heard in the answer to its next write, as an SDK agent hears it in the answer to its
    # next events: that step was already on its way; the boundary after it rolls back.
    engine.execute(EMAIL, {"to": "ada@example.com"})
    with pytest.raises(RollbackRequestedError) as heard:
        engine.execute(EMAIL, {"to": "bob@example.com"})  # not run: the stop comes first
    assert heard.value.requested_by == "olga" and heard.value.reason == "customer cancelled"
    engine.release()
    saga.refresh_from_db()
    assert saga.status == "ROLLED_BACK" and saga.rollback_request_heard_at is not None
    assert sorted(saga.steps.values_list("tool_name", "state")) == [
        ("deduct_inventory", "ROLLED_BACK"),
        ("send_email", "COMPLETED"),  # no undo: skipped
    ]
    assert runner.stop_run(saga.pk) == "ROLLED_BACK"  # the worker's task finds it done
    saga.refresh_from_db()
    assert saga.rollback_request_done_at is not None

"""What the pages decide in Python (sagaboard.sagas.pages.presenters, the model properties the
templates
read) and the shape of the live fragments (sagaboard.live.fragments): which step shows an
operator's controls, which badge a status gets, which fragment a queue change sends."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sagaboard.actions.pages import presenters as queue_presenters
from sagaboard.actions.services import runner
from sagaboard.actions.services.work_queues import FailureGroup
from sagaboard.engine.reads import rollback_outcomes
from sagaboard.live import fragments
from sagaboard.models import OPERATOR_STATES, Approval, Project, Saga, Step
from sagaboard.sagas.pages import presenters
from tests.support.hitl import login, storebot_server_saga, waiting
from undo_core import STEP_TRANSITIONS, RollbackOutcome, SagaStatus, StepState

HTMX = {"HX-Request": "true"}
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def step(state: StepState, **fields: object) -> Step:
    return Step(step_id="step-1", tool_name="refund", state=state, **fields)


# ---------------------------------------------------------------- steps


def test_an_operator_settles_the_states_undo_cores_table_lets_a_person_resolve() -> None:
    assert OPERATOR_STATES == (StepState.ROLLBACK_FAILED, StepState.IN_DOUBT)
    assert rollback_outcomes.OPERATOR_STATES is OPERATOR_STATES  # the queries' rule too
    assert all(StepState.RESOLVED in STEP_TRANSITIONS[s] for s in OPERATOR_STATES)


@pytest.mark.parametrize("state", list(StepState))
def test_only_a_failed_or_in_doubt_undo_shows_the_operator_controls(state: StepState) -> None:
    assert step(state).needs_operator is (state in (StepState.ROLLBACK_FAILED, StepState.IN_DOUBT))


@pytest.mark.parametrize("state", [StepState.ROLLBACK_FAILED, StepState.IN_DOUBT])
def test_a_left_or_already_requested_undo_shows_no_operator_controls(state: StepState) -> None:
    assert not step(state, left_at=NOW, left_by="ann").needs_operator
    assert not step(state, pending_action={"action": "retry", "by": "ann"}).needs_operator


@pytest.mark.parametrize(
    ("state", "stays"),
    [
        (StepState.COMPLETED, True),
        (StepState.ROLLBACK_FAILED, True),
        (StepState.IN_DOUBT, True),
        (StepState.PENDING, False),  # it never ran
        (StepState.FAILED, False),  # it failed: nothing of it stays
    ],
)
def test_a_step_without_undo_keeps_its_side_effect_only_if_it_ran(
    state: StepState, stays: bool
) -> None:
    assert step(state, has_undo=False).effect_stays is stays
    assert not step(state, has_undo=True).effect_stays


@pytest.mark.parametrize("state", list(StepState))
def test_a_steps_error_is_current_only_while_it_stands_failed(state: StepState) -> None:
    failed = {StepState.FAILED, StepState.ROLLBACK_FAILED, StepState.IN_DOUBT}
    assert step(state).error_is_current is (state in failed)


def test_only_a_reversible_step_is_fully_reversible() -> None:
    assert step(StepState.COMPLETED).fully_reversible  # the default
    assert not step(StepState.COMPLETED, reversibility="partial").fully_reversible
    assert not step(StepState.COMPLETED, reversibility="irreversible").fully_reversible


# ---------------------------------------------------------------- sagas


@pytest.mark.parametrize(
    ("status", "outcome", "css"),
    [
        (SagaStatus.ROLLED_BACK, RollbackOutcome.WITH_EXCEPTIONS, "rolled_back_with_exceptions"),
        (SagaStatus.ROLLED_BACK, RollbackOutcome.CLEAN, "rolled_back"),
        (SagaStatus.ROLLBACK_FAILED, RollbackOutcome.WITH_EXCEPTIONS, "rollback_failed"),
        (SagaStatus.COMPENSATING, None, "compensating"),
        (SagaStatus.IN_PROGRESS, None, "in_progress"),
    ],
)
def test_a_rollback_with_exceptions_never_wears_the_clean_badge(
    status: SagaStatus, outcome: RollbackOutcome | None, css: str
) -> None:
    assert Saga(status=status, outcome=outcome).badge_css == css


def test_only_a_failed_rollback_says_what_it_holds_beside_its_badge() -> None:
    failed = Saga(status=SagaStatus.ROLLBACK_FAILED, outcome="WITH_EXCEPTIONS",
                  outcome_summary="1 undo failed")  # fmt: skip
    assert failed.rollback_failed and failed.outcome_note == "1 undo failed"
    assert failed.status_badge == "ROLLBACK_FAILED"
    rolled = Saga(status=SagaStatus.ROLLED_BACK, outcome="WITH_EXCEPTIONS",
                  outcome_summary="1 rejected")  # fmt: skip
    assert not rolled.rollback_failed and rolled.outcome_note == ""
    assert rolled.status_badge == "ROLLED BACK with exceptions (1 rejected)"  # said in the badge


def test_the_times_are_the_agents_only_for_a_saga_the_agent_runs() -> None:
    assert Saga(driver="client").agent_driven
    assert not Saga(driver="server").agent_driven


@pytest.mark.parametrize("status", list(SagaStatus))
def test_the_compensation_plan_shows_while_a_rollback_runs_halts_or_may_come(
    status: SagaStatus,
) -> None:
    shown = {
        SagaStatus.IN_PROGRESS,
        SagaStatus.FAILED,
        SagaStatus.COMPENSATING,
        SagaStatus.ROLLBACK_FAILED,
    }
    assert presenters.shows_compensation_plan(status) is (status in shown)


# ---------------------------------------------------------------- approvals and groups


def test_an_approval_is_pending_and_four_eyes_by_its_own_fields() -> None:
    assert Approval(status="PENDING").is_pending
    assert not Approval(status="APPROVED").is_pending
    assert not Approval(status="REJECTED").is_pending
    assert Approval(required=2).four_eyes and not Approval(required=1).four_eyes


def test_the_queue_hides_only_the_plan_of_an_agent_run_undo_that_cannot_run() -> None:
    assert queue_presenters.approval_shows_plan({"kind": "handler"}, "")
    assert queue_presenters.approval_shows_plan({"kind": "command"}, "commands are off")
    assert queue_presenters.approval_shows_plan({"kind": "client"}, "")
    assert not queue_presenters.approval_shows_plan({"kind": "client"}, "the agent is gone")


def test_a_queue_event_appends_a_new_approval_replaces_a_changed_one_removes_a_decided_one() -> (
    None
):
    pending, decided = Approval(status="PENDING"), Approval(status="APPROVED")
    assert (
        queue_presenters.queue_fragment(pending, "approval.requested")
        == queue_presenters.QUEUE_ADDED
    )
    assert (
        queue_presenters.queue_fragment(pending, "approval.voted") == queue_presenters.QUEUE_CHANGED
    )
    assert (
        queue_presenters.queue_fragment(decided, "approval.decided") == queue_presenters.QUEUE_GONE
    )
    assert (
        queue_presenters.queue_fragment(decided, "approval.requested")
        == queue_presenters.QUEUE_GONE
    )


def test_a_failure_group_offers_bulk_actions_from_two_failures() -> None:
    one = FailureGroup("x", "refund", "boom", [step(StepState.ROLLBACK_FAILED)])
    two = FailureGroup("x", "refund", "boom", [step(StepState.ROLLBACK_FAILED)] * 2)
    assert (one.size, one.bulk) == (1, False)
    assert (two.size, two.bulk) == (2, True)


def test_the_timeline_gives_each_step_its_own_approvals_in_order() -> None:
    s1, s2, s3 = (Step(pk=n, step_id=f"step-{n}") for n in (1, 2, 3))
    a1, a2, a3 = (Approval(pk=n, step_id=pk) for n, pk in ((1, 2), (2, 3), (3, 2)))
    assert presenters.timeline([s1, s2, s3], [a1, a2, a3]) == [(s1, []), (s2, [a1, a3]), (s3, [a2])]


# ---------------------------------------------------------------- on the pages


@pytest.fixture
def shop(db: None) -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def failing(shop: Project) -> Step:
    saga = storebot_server_saga(shop, "f-1", refund_needs_approval=False, return_fails_first=5)
    runner.rollback_continue(saga.pk)
    return Step.objects.get(saga=saga, tool_name="return_item", state="ROLLBACK_FAILED")


def test_the_saga_page_shows_the_operator_controls_on_the_failed_undo_only(shop: Project) -> None:
    failed = failing(shop)
    client = login("operator", shop)
    page = client.get("/sagas/shop/f-1/").content.decode()
    assert page.count('<form class="act needs-operate"') == 1
    assert f'hx-post="/steps/{failed.pk}/action/"' in page
    Step.objects.filter(pk=failed.pk).update(pending_action={"action": "retry", "by": "ann"})
    page = client.get("/sagas/shop/f-1/").content.decode()
    assert '<form class="act needs-operate"' not in page
    assert "retry requested by ann" in page


def test_the_saga_page_lists_each_approval_under_its_own_step(shop: Project) -> None:
    approval = waiting(shop)
    page = login("viewer", shop).get("/sagas/shop/s-1/").content.decode()
    step_html = page[page.index(f'id="step-{approval.step.step_id}"') :]
    step_html = step_html[: step_html.index("</li>\n", step_html.index("approval-record"))]
    assert step_html.count('class="step"') == 1  # this step's item only
    assert f"Approval #{approval.pk}" in step_html
    assert f'href="/approvals/#approval-{approval.pk}">decide in the queue</a>' in step_html
    assert f'<div class="approval-record" id="approval-{approval.pk}">' in step_html
    assert page.count("Approval #") == 1


# ---------------------------------------------------------------- live fragments


def test_a_live_queue_item_replaces_the_shown_one_and_a_new_one_is_appended(
    shop: Project,
) -> None:
    a = waiting(shop)
    args = ([shop], a.saga_id, a.step.step_id)
    changed = fragments.queue_changes(*args, "approval.voted")
    assert changed.startswith(f'<li hx-swap-oob="outerHTML" class="approval" id="approval-{a.pk}"')
    added = fragments.queue_changes(*args, "approval.requested")
    assert added.startswith(
        f'<ol hx-swap-oob="beforeend:#approval-items"><li class="approval" id="approval-{a.pk}"'
    )
    assert added.count("hx-swap-oob") == 1 and added.endswith("</li>\n</ol>")
    for html in (changed, added):
        assert "csrfmiddlewaretoken" not in html  # shared between users: nobody's token
    Approval.objects.filter(pk=a.pk).update(status="APPROVED")
    gone = fragments.queue_changes(*args, "approval.decided")
    assert gone == f'<li id="approval-{a.pk}" hx-swap-oob="delete"></li>'


def test_the_live_saga_row_goes_on_top_and_moves_the_cursor(shop: Project) -> None:
    saga = storebot_server_saga(shop, "s-1")
    row = fragments.saga_row(saga, 41)
    assert row.startswith(f'<tbody hx-swap-oob="afterbegin:#saga-rows"><tr id="saga-{saga.pk}">')
    assert row.endswith(
        '</tbody>\n<span id="live-cursor" data-last="41" hx-swap-oob="true"></span>\n'
    )
    assert fragments.saga_row_gone(saga.pk) == (
        f'<tbody hx-swap-oob="afterbegin:#saga-rows"><tr id="saga-{saga.pk}" data-gone hidden>'
        "</tr></tbody>"
    )


def test_the_live_saga_body_and_attention_body_replace_the_shown_ones(shop: Project) -> None:
    failed = failing(shop)
    detail = fragments.saga_detail(failed.saga_id, 3)
    saga_pk = failed.saga_id
    assert detail.startswith(
        f'<div hx-swap-oob="outerHTML:#saga-live-{saga_pk}"><div id="saga-live-{saga_pk}" '
    )
    body = fragments.attention_body([shop])
    assert body.startswith('<div id="attention-body" hx-swap-oob="true">')
    assert f'id="failure-{failed.pk}"' in body and "csrfmiddlewaretoken" not in body
    page = login("operator", shop).get("/attention/").content.decode()
    assert '<div id="attention-body">' in page and "hx-swap-oob" not in page
    assert "csrfmiddlewaretoken" in page  # the page's own forms post without htmx too

"""The retry button is offered only where a retry can run (``undo_kinds.retry_refused``):
an undo that lives in an agent's process nobody holds any more can only be refused, so the
pages, the needs-attention queue and their live fragments say why instead of offering it."""

from __future__ import annotations

import pytest

from sagaboard.actions.services import runner, saga_stop
from sagaboard.actions.services.work_queues import FailureGroup
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.live import fragments
from sagaboard.models import Project, Saga, Step
from tests.support.hitl import login, person, storebot_server_saga
from undo_core import Saga as EngineSaga
from undo_core import define_tool

pytestmark = pytest.mark.django_db

RESERVE = define_tool("deduct_inventory", lambda inp: {"reserved": True}, lambda out: None)
RETRY_BUTTON = 'name="action" value="retry"'
REFUSED = "Retry is not offered: the undo of &#x27;deduct_inventory&#x27; lives in the agent"


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def agent_gone_failure(shop: Project, saga_id: str = "gone") -> Step:
    """An engine saga whose process is gone, stopped: its agent's undo waits for an operator."""
    engine = EngineSaga("checkout-flow", saga_id=saga_id, store=DjangoStore(shop))
    engine.execute(RESERVE, {"sku": "xyz"})
    engine.release()
    saga = Saga.objects.get(project=shop, saga_id=saga_id)
    olga = person(f"olga-{saga_id}", "operator", shop)
    saga_stop.rollback_request(saga_pk=saga.pk, user=olga, reason="customer cancelled")
    assert runner.stop_run(saga.pk) == "ROLLBACK_FAILED"
    return Step.objects.get(saga=saga, tool_name="deduct_inventory", state="ROLLBACK_FAILED")


def server_failure(shop: Project, saga_id: str = "f-1") -> Step:
    """A saga sagaboard runs whose undo failed: a retry runs it again here."""
    saga = storebot_server_saga(shop, saga_id, refund_needs_approval=False, return_fails_first=5)
    runner.rollback_continue(saga.pk)
    return Step.objects.get(saga=saga, tool_name="return_item", state="ROLLBACK_FAILED")


def failure_html(body: str, step: Step) -> str:
    """The needs-attention item of ``step`` (its ``<li>``)."""
    start = body.index(f'id="failure-{step.pk}"')
    return body[start : body.index("</li>", start)]


def test_the_saga_page_offers_no_retry_of_an_undo_whose_agent_is_gone(shop: Project) -> None:
    step = agent_gone_failure(shop)
    page = login("operator", shop).get("/sagas/shop/gone/").content.decode()
    assert f'hx-post="/steps/{step.pk}/action/"' in page  # resolve and leave stay
    assert RETRY_BUTTON not in page
    assert REFUSED in page
    assert 'value="resolve"' in page and 'value="leave"' in page
    assert '<span class="muted retry-refused">' in page


def test_the_live_saga_body_does_not_bring_the_retry_back(shop: Project) -> None:
    step = agent_gone_failure(shop)
    live = fragments.saga_detail(step.saga_id, 7)
    assert RETRY_BUTTON not in live and REFUSED in live
    assert 'value="resolve"' in live


def test_the_attention_queue_offers_no_retry_of_an_undo_whose_agent_is_gone(
    shop: Project,
) -> None:
    step = agent_gone_failure(shop)
    body = login("operator", shop).get("/attention/").content.decode()
    item = failure_html(body, step)
    assert RETRY_BUTTON not in item and REFUSED in item
    assert 'value="resolve"' in item and 'value="leave"' in item
    live = failure_html(fragments.attention_body([shop]), step)
    assert RETRY_BUTTON not in live and REFUSED in live


def test_a_group_of_undos_none_can_retry_offers_resolve_all_but_no_retry_all(
    shop: Project,
) -> None:
    agent_gone_failure(shop, "gone-1")
    agent_gone_failure(shop, "gone-2")
    body = fragments.attention_body([shop])
    group = body[: body.index('<ul class="failures">')]
    assert "Resolve all 2" in group and "Retry all" not in group
    assert REFUSED in group
    assert RETRY_BUTTON not in body


def test_a_failed_undo_sagaboard_runs_keeps_its_retry_button(shop: Project) -> None:
    step = server_failure(shop)
    client = login("operator", shop)
    page = client.get("/sagas/shop/f-1/").content.decode()
    assert page.count(RETRY_BUTTON) == 1 and "Retry is not offered" not in page
    assert RETRY_BUTTON in fragments.saga_detail(step.saga_id, 7)
    item = failure_html(client.get("/attention/").content.decode(), step)
    assert RETRY_BUTTON in item and "Retry is not offered" not in item
    assert RETRY_BUTTON in failure_html(fragments.attention_body([shop]), step)


def test_a_group_mixing_both_says_how_many_cannot_be_retried() -> None:
    can, cannot = Step(), Step()
    can.retry_refused, cannot.retry_refused = "", "no agent"  # type: ignore[attr-defined]
    assert FailureGroup("x", "t", "e", [can, can]).retry_refused == ""
    assert FailureGroup("x", "t", "e", [cannot, cannot]).retry_refused == "no agent"
    mixed = FailureGroup("x", "t", "e", [can, cannot])
    assert mixed.retry_refused == "1 of 2 cannot be retried here (no agent)"

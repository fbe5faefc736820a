"""A rollback with exceptions never looks clean: list, saga page, overview, API, /metrics and
notifications all say "with exceptions" for an undo rejected, resolved by hand, left failed or
in doubt; a clean one still reads clean. And "waiting for a person" is shown wherever sagas are
listed, and "Leave failed" is reflected the same way everywhere."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.actions.services import operator_actions, runner
from sagaboard.approvals.services import approvals
from sagaboard.engine.reads import rollback_outcomes
from sagaboard.health.reads import overview
from sagaboard.models import Approval, Notification, Project, Saga, Step
from tests.support.agent_runs import Recorder
from tests.support.badges import status_texts
from tests.support.hitl import person, storebot_server_saga
from undo_core import Decision, SagaRollbackError, define_tool
from undo_core import Saga as LocalSaga
from undo_core.engine.recovery import recover
from undo_core.testing import FakeClock, ScriptedGate

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def api(shop: Project) -> Callable[..., Any]:
    token = token_create(project=shop, label="agent").secret
    http = Client(headers={"authorization": f"Bearer {token}"})

    def call(method: str, path: str, body: Any = None) -> Any:
        if method == "get":
            return http.get(f"/api/v1{path}")
        return http.post(f"/api/v1{path}", json.dumps(body), content_type="application/json")

    return call


@pytest.fixture
def notify(settings: Any) -> None:
    settings.SAGABOARD_NOTIFY_URL = "https://hooks.example/sagaboard"
    settings.SAGABOARD_BASE_URL = "https://board.example"


def _noop(*args: Any) -> None:
    return None


def _down(*args: Any) -> Any:
    raise ConnectionError("FedEx API returned 500")


RETURN = define_tool("return_item", lambda i: {"rma": "RMA-882"}, _noop)
LABEL = define_tool("generate_label", _down)


def agent_run(api: Callable[..., Any], saga_id: str, refund: Any, **options: Any) -> LocalSaga:
    """StoreBot in the agent (return_item, refund_payment, generate_label fails), mirrored
    through the events API as the SDK sends it."""
    store = Recorder()
    saga = LocalSaga("storebot-return", store=store, saga_id=saga_id, **options)
    saga.execute(RETURN, {"itemId": "882"})
    saga.execute(refund, {"chargeId": "ch_1"})
    with pytest.raises(SagaRollbackError):
        saga.execute(LABEL, {"orderId": "o-1"})
    send(api, store)
    saga._store_sent = store  # type: ignore[attr-defined]
    return saga


def send(api: Callable[..., Any], store: Recorder) -> None:
    answer = api("post", "/events", {"events": store.sent})
    assert answer.status_code == 200, answer.content
    store.sent.clear()


def rejected(api: Callable[..., Any]) -> str:
    refund = define_tool("refund_payment", lambda i: {"id": "re_1"}, _noop, requires_approval=True)
    gate = ScriptedGate(approvals=[Decision.reject("goodwill gesture", actor="bob")])
    agent_run(api, "rejected-1", refund, gate=gate)
    return "rejected-1"


def resolved(api: Callable[..., Any]) -> str:
    refund = define_tool("refund_payment", lambda i: {"id": "re_1"}, _down)
    saga = agent_run(api, "resolved-1", refund, on_compensation_failure="halt")
    saga.resolve("step-2", "refunded by hand in Stripe", actor="olga")
    saga.resume_rollback()
    send(api, saga._store_sent)  # type: ignore[attr-defined]
    return "resolved-1"


def left(api: Callable[..., Any]) -> str:
    refund = define_tool("refund_payment", lambda i: {"id": "re_1"}, _down)
    agent_run(api, "left-1", refund, on_compensation_failure="halt")
    step = Step.objects.get(saga__saga_id="left-1", step_id="step-2")
    olga = person("olga", "operator", step.saga.project)
    operator_actions.step_act(
        step_pk=step.pk, user=olga, action="leave", reason="Stripe handles it"
    )
    return "left-1"


def in_doubt(api: Callable[..., Any]) -> str:
    clock, store = FakeClock(), Recorder()
    saga = LocalSaga("storebot-return", store=store, saga_id="doubt-1", clock=clock)
    saga.execute(RETURN, {"itemId": "882"})
    saga.add_step(LABEL, {"orderId": "o-1"})  # the process dies while it runs
    clock.advance(3600)
    recover(store, [RETURN, LABEL], clock=clock)
    send(api, store)
    return "doubt-1"


def clean(api: Callable[..., Any]) -> str:
    refund = define_tool("refund_payment", lambda i: {"id": "re_1"}, _noop)
    agent_run(api, "clean-1", refund)
    return "clean-1"


def metric(client: Client, **labels: str) -> float:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    text = client.get("/metrics").content.decode()
    found = re.search(rf"^sagaboard_sagas\{{{re.escape(inner)}\}} (\S+)$", text, re.M)
    assert found, text
    return float(found.group(1))


def row_of(html: str, saga: Saga) -> str:
    found = re.search(rf'<tr id="saga-{saga.pk}">.*?</tr>', html, re.S)
    assert found, html
    return found.group(0)


@pytest.mark.parametrize(
    ("make", "status", "label"),
    [
        (rejected, "ROLLED_BACK", "ROLLED BACK with exceptions (1 rejected)"),
        (resolved, "ROLLED_BACK", "ROLLED BACK with exceptions (1 resolved by hand)"),
        (left, "ROLLBACK_FAILED", "ROLLBACK_FAILED (1 left failed, 1 not undone)"),
        (in_doubt, "ROLLBACK_FAILED", "ROLLBACK_FAILED (1 in doubt)"),
    ],
)
def test_a_rollback_with_exceptions_never_looks_clean_anywhere(
    shop: Project,
    api: Callable[..., Any],
    notify: None,
    make: Callable[..., str],
    status: str,
    label: str,
) -> None:
    saga = Saga.objects.get(saga_id=make(api))
    assert (saga.status, saga.outcome) == (status, "WITH_EXCEPTIONS")
    assert saga.status_label == label
    viewer = Client()
    viewer.force_login(person("vic", "viewer", shop))

    row = row_of(viewer.get("/").content.decode(), saga)
    assert label in row and 'status-rolled_back"' not in row
    page = viewer.get(f"/sagas/shop/{saga.saga_id}/").content.decode()
    assert re.search(r"<h1>.*" + re.escape(label), page, re.S)
    filtered = viewer.get("/?outcome=WITH_EXCEPTIONS").content.decode()
    assert f'id="saga-{saga.pk}"' in filtered
    assert f'id="saga-{saga.pk}"' not in viewer.get("/?outcome=CLEAN").content.decode()

    cache.clear()
    counts = {c.status: c.count for c in overview.status_counts([shop])}
    assert counts["ROLLED_BACK"] == 0  # never counted as a clean rollback
    assert counts["ROLLED_BACK_WITH_EXCEPTIONS"] == (status == "ROLLED_BACK")
    bars = overview.throughput([shop], "hour")
    assert not any(b.by_status.get("ROLLED_BACK") for b in bars)

    body = api("get", f"/sagas/{saga.saga_id}").json()
    assert body["outcome"] == "WITH_EXCEPTIONS" and body["status_text"].startswith(label)
    assert body["exceptions"] and all(e["why"] for e in body["exceptions"])
    listed = api("get", "/sagas?outcome=WITH_EXCEPTIONS").json()["items"]
    assert [s["id"] for s in listed] == [saga.saga_id]
    assert api("get", "/sagas?outcome=CLEAN").json()["items"] == []

    assert metric(viewer, status=status, outcome="WITH_EXCEPTIONS") == 1
    if status == "ROLLED_BACK":
        assert metric(viewer, status="ROLLED_BACK", outcome="CLEAN") == 0
        note = Notification.objects.get(kind="saga.rolled_back_with_exceptions")
        assert label in note.payload["text"] and "/sagas/shop/" in note.payload["text"]
        assert note.payload["sagaboard"]["outcome"] == "WITH_EXCEPTIONS"


def test_a_clean_rollback_still_reads_clean(
    shop: Project, api: Callable[..., Any], notify: None
) -> None:
    saga = Saga.objects.get(saga_id=clean(api))
    assert (saga.status, saga.outcome, saga.status_label) == ("ROLLED_BACK", "CLEAN", "ROLLED_BACK")
    viewer = Client()
    viewer.force_login(person("vic", "viewer", shop))
    row = row_of(viewer.get("/").content.decode(), saga)
    assert 'class="status status-rolled_back"' in row and "exceptions" not in row
    cache.clear()
    counts = {c.status: c.count for c in overview.status_counts([shop])}
    assert (counts["ROLLED_BACK"], counts["ROLLED_BACK_WITH_EXCEPTIONS"]) == (1, 0)
    body = api("get", f"/sagas/{saga.saga_id}").json()
    assert (body["outcome"], body["exceptions"], body["status_text"]) == (
        "CLEAN",
        [],
        "ROLLED_BACK",
    )
    assert metric(viewer, status="ROLLED_BACK", outcome="CLEAN") == 1
    assert not Notification.objects.filter(kind="saga.rolled_back_with_exceptions").exists()


def test_a_server_run_saga_whose_refund_undo_was_rejected_is_not_a_green_rolled_back(
    shop: Project,
) -> None:
    """The issue's case: the worker's engine writes through DjangoStore, not ingestion."""
    saga = storebot_server_saga(shop, "srv-1")
    assert runner.rollback_continue(saga.pk) == "COMPENSATING"
    approval = Approval.objects.get(saga=saga, status="PENDING")
    approvals.approval_decide(
        approval_id=approval.pk, user=person("ann", "approver", shop), decision="reject",
        reason="the refund stands",
    )  # fmt: skip
    assert runner.rollback_continue(saga.pk) == "ROLLED_BACK"
    saga.refresh_from_db()
    assert saga.outcome == "WITH_EXCEPTIONS"
    assert saga.status_label == "ROLLED BACK with exceptions (1 rejected)"
    page = Client()
    page.force_login(person("vic", "viewer", shop))
    html = page.get("/sagas/shop/srv-1/").content.decode()
    assert "status-rolled_back_with_exceptions" in html


# ---------------------------------------------------------------- waiting for a person


def test_waiting_for_a_person_is_shown_on_the_list_the_overview_and_the_api(
    shop: Project, api: Callable[..., Any]
) -> None:
    saga = storebot_server_saga(shop, "wait-1")
    runner.rollback_continue(saga.pk)  # stops before the refund's undo: an approval
    saga.refresh_from_db()
    assert (saga.status, saga.waiting_for) == ("COMPENSATING", "APPROVAL")
    viewer = Client()
    viewer.force_login(person("vic", "viewer", shop))
    assert "waiting for a person: an approver" in row_of(viewer.get("/").content.decode(), saga)
    assert f'id="saga-{saga.pk}"' in viewer.get("/?waiting=1").content.decode()
    cache.clear()
    counts = {c.status: c.count for c in overview.status_counts([shop])}
    assert counts["WAITING"] == 1
    assert "waiting for a person" in viewer.get("/overview/").content.decode()
    body = api("get", "/sagas?waiting=true").json()["items"]
    assert [(s["id"], s["waiting_for"]) for s in body] == [("wait-1", "APPROVAL")]


def test_a_failed_undo_waits_for_an_operator_until_it_is_left_and_then_nobody_anywhere(
    shop: Project,
) -> None:
    saga = storebot_server_saga(shop, "fail-1", refund_needs_approval=False, return_fails_first=9)
    runner.rollback_continue(saga.pk)
    saga.refresh_from_db()
    assert (saga.status, saga.waiting_for) == ("ROLLBACK_FAILED", "OPERATOR")
    step = Step.objects.get(saga=saga, state="ROLLBACK_FAILED")
    olga = person("olga", "operator", shop)
    page = Client()
    page.force_login(olga)
    cache.clear()
    assert [s.pk for s in overview.steps_needing_attention([shop])] == [step.pk]
    assert f'id="failure-{step.pk}"' in page.get("/attention/").content.decode()

    operator_actions.step_act(step_pk=step.pk, user=olga, action="leave", reason="done in the WMS")
    saga.refresh_from_db()
    assert saga.waiting_for is None and saga.status_label == "ROLLBACK_FAILED (1 left failed)"
    assert overview.steps_needing_attention([shop]) == []
    assert f'id="failure-{step.pk}"' not in page.get("/attention/").content.decode()
    html = page.get("/sagas/shop/fail-1/").content.decode()
    assert "left failed by user:olga: the side effect stays (done in the WMS)" in html
    assert "waits for an operator" not in html
    assert "waiting for a person" not in row_of(page.get("/").content.decode(), saga)


def test_the_failed_forward_step_is_not_said_to_keep_a_side_effect(shop: Project) -> None:
    """generate_label failed (it never ran) and has no undo: nothing of it stays."""
    saga = storebot_server_saga(shop, "label-1", refund_needs_approval=False)
    runner.rollback_continue(saga.pk)
    viewer = Client()
    viewer.force_login(person("vic", "viewer", shop))
    html = viewer.get("/sagas/shop/label-1/").content.decode()
    label = re.search(r"step-3 · generate_label.*?</h3>", html, re.S)
    assert label and status_texts(label.group(0)) == ["FAILED"]
    assert "no undo: its side effect stays" not in label.group(0)


def test_a_completed_step_without_undo_is_said_to_keep_its_side_effect(
    shop: Project, api: Callable[..., Any]
) -> None:
    email = define_tool("send_email", lambda i: "sent")
    agent_run(api, "mail-1", email)
    viewer = Client()
    viewer.force_login(person("vic", "viewer", shop))
    html = viewer.get("/sagas/shop/mail-1/").content.decode()
    label = re.search(r"step-2 · send_email.*?</h3>", html, re.S)
    assert label and "no undo: its side effect stays" in label.group(0)
    assert Saga.objects.get(saga_id="mail-1").status_label == (
        "ROLLED BACK with exceptions (1 without undo)"
    )


def test_the_migration_backfills_the_outcome_from_the_steps(
    shop: Project, api: Callable[..., Any]
) -> None:
    from importlib import import_module

    from django.apps import apps

    rejected(api)
    clean(api)
    Saga.objects.update(outcome=None, outcome_summary="", waiting_for=None)
    import_module("sagaboard.migrations.0010_rollback_outcome").backfill(apps, None)
    found = dict(Saga.objects.values_list("saga_id", "outcome"))
    assert found == {"rejected-1": "WITH_EXCEPTIONS", "clean-1": "CLEAN"}
    saga = Saga.objects.get(saga_id="rejected-1")
    assert rollback_outcomes.assess(saga).summary == saga.outcome_summary == "1 rejected"

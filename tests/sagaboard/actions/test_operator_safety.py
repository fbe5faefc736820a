"""Operator safety on the pages: Enter never decides, bulk reports say what really happened,
values read as JSON, every work item names its saga, unknown pages answer the product's 404."""

from __future__ import annotations

import csv
import io
import json
from html.parser import HTMLParser
from typing import Any

import pytest
from django.test import Client

from sagaboard.access.services import tokens
from sagaboard.actions.services import runner
from sagaboard.infra import jobs
from sagaboard.live import consumers
from sagaboard.models import Approval, AuditEntry, Project, Saga, Step
from sagaboard.ui.present import json_text
from tests.support.hitl import login, person, storebot_server_saga, waiting

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
TRICKY = {
    "flag": True,
    "gone": None,
    "off": False,
    "nested": {"käse": "größe ✓", "list": [1, 2.5, "it's"], "deep": {"x": None}},
    "html": "<b>bold</b>",
}


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def failing(shop: Project, saga_id: str = "f-1", fails: int = 5) -> Step:
    saga = storebot_server_saga(
        shop, saga_id, refund_needs_approval=False, return_fails_first=fails
    )
    runner.rollback_continue(saga.pk)
    return Step.objects.get(saga=saga, tool_name="return_item", state="ROLLBACK_FAILED")


@pytest.fixture
def worker_runs_at_once(transactional_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a request sees when the worker is quick (or tasks run eagerly): the retry or the
    rollback has already run by the time the report is written. Transactional, as a server
    is: the task is queued when the action's transaction commits, inside the request."""
    work = {jobs.STEP_ACTION_RUN: runner.step_action_run,
            jobs.ROLLBACK_CONTINUE: runner.rollback_continue}  # fmt: skip
    monkeypatch.setattr(jobs, "enqueue_now", lambda name, pk, countdown=None: work[name](pk))


# ---------------------------------------------------------------- Enter never decides


class _Forms(HTMLParser):
    """Each decision form (decide / act / bulk) and its submit buttons, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        revoke = "/revoke/" in (a.get("action") or "")  # a token's revocation: irreversible
        if tag == "form" and ({"decide", "act", "bulk"} & set(classes) or revoke):
            self._open = {"classes": classes, "buttons": []}
            self.forms.append(self._open)
        elif tag == "button" and self._open is not None and a.get("type") == "submit":
            self._open["buttons"].append(a)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._open = None


def decision_forms(html: str) -> list[dict[str, Any]]:
    parser = _Forms()
    parser.feed(html)
    return parser.forms


def test_enter_in_any_decision_form_presses_a_disabled_button(shop: Project) -> None:
    """Enter in a text field (or on a checkbox) presses the form's first submit button:
    in every decision form that is a disabled guard, so the browser submits nothing."""
    waiting(shop, "s-1")
    waiting(shop, "s-2")
    failing(shop, "f-1")
    failing(shop, "f-2")
    client = Client()
    client.force_login(person("root", "admin", shop))  # admin: approver and operator
    pages = {
        "/approvals/": 3,  # two items and the bulk form
        "/attention/": 4,  # two failures, the group's bulk form, the selection's bulk form
        "/sagas/shop/f-1/": 1,  # the failed step's actions
        "/tokens/": 1,  # revoking a token
    }
    tokens.token_create(project=shop, label="bot")
    for url, expected in pages.items():
        forms = decision_forms(client.get(url).content.decode())
        assert len(forms) == expected, url
        for form in forms:
            first, *actions = form["buttons"]
            assert "disabled" in first and "enter-guard" in (first.get("class") or ""), url
            assert actions and all("disabled" not in b for b in actions), url


# ---------------------------------------------------------------- bulk reports


def test_a_bulk_retry_that_failed_again_is_reported_failed_not_done(
    shop: Project, worker_runs_at_once: None
) -> None:
    one, two = failing(shop, "f-1"), failing(shop, "f-2")
    response = login("operator", shop).post(
        "/steps/bulk/", {"step": [one.pk, two.pk], "action": "retry", "expected": "2"}, headers=HTMX
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "Retry, 2 selected: 2 failed." in page and "done" not in page
    assert page.count('data-result="failed"') == 2
    assert "the undo failed again, the step is ROLLBACK_FAILED" in page
    assert "upstream timed out (attempt 2)" in page  # each item's own error
    assert 'class="message error bulk-report"' in page and 'role="alert"' in page
    assert set(Step.objects.filter(pk__in=[one.pk, two.pk]).values_list("state", flat=True)) == {
        "ROLLBACK_FAILED"
    }


def test_a_bulk_report_tells_succeeded_failed_and_refused_apart(
    shop: Project, worker_runs_at_once: None
) -> None:
    works = failing(shop, "f-ok", fails=1)  # its second attempt succeeds
    fails = failing(shop, "f-bad", fails=5)
    left = failing(shop, "f-left", fails=5)
    client = login("operator", shop)
    client.post(f"/steps/{left.pk}/action/", {"action": "leave", "reason": "later"}, headers=HTMX)
    response = client.post(
        "/steps/bulk/",
        {"step": [works.pk, fails.pk, left.pk], "action": "retry", "expected": "3"},
        headers=HTMX,
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "Retry, 3 selected: 1 succeeded, 1 failed, 1 refused." in page
    items = page.split('<li class="outcome')[1:]
    assert [i.split('data-result="')[1].split('"')[0] for i in items] == [
        "succeeded", "failed", "refused",
    ]  # fmt: skip
    assert "f-ok" in items[0] and "the undo ran: ROLLED_BACK" in items[0]
    assert "f-bad" in items[1] and "failed again" in items[1]
    assert "already left failed by user:operator-1: later" in items[2]


def test_a_bulk_retry_not_yet_run_says_requested_and_for_whom(shop: Project) -> None:
    one = failing(shop, "f-1")
    response = login("operator", shop).post(
        "/steps/bulk/", {"step": [one.pk], "action": "retry"}, headers=HTMX
    )
    page = response.content.decode()
    assert "Retry, 1 selected: 1 requested, not run yet." in page
    assert "retry queued for a worker" in page
    assert 'class="message info bulk-report"' in page  # never the success colour for a request


def test_a_bulk_approval_whose_undo_ran_reports_the_undo(
    shop: Project, worker_runs_at_once: None
) -> None:
    approval = waiting(shop)
    response = login("approver", shop).post(
        "/approvals/bulk/",
        {"approval": [approval.pk], "decision": "approve", "reason": "go"},
        headers=HTMX,
    )
    page = response.content.decode()
    assert "Approve, 1 selected: 1 succeeded." in page
    assert "approved, and the undo ran: ROLLED_BACK" in page


def test_a_four_eyes_vote_is_reported_waiting_for_another_approver(shop: Project) -> None:
    approval = waiting(shop)
    Approval.objects.filter(pk=approval.pk).update(required=2)
    response = login("approver", shop).post(
        "/approvals/bulk/",
        {"approval": [approval.pk], "decision": "approve", "reason": "one of two"},
        headers=HTMX,
    )
    page = response.content.decode()
    assert "Approve, 1 selected: 1 waiting for another approver." in page
    assert "1 of 2 approvals in; one more approver needed" in page
    assert 'class="message info bulk-report"' in page


def test_a_bulk_report_without_htmx_lists_each_item_as_a_message(shop: Project) -> None:
    one = failing(shop, "f-1")
    page = login("operator", shop).post(
        "/steps/bulk/", {"step": [one.pk, 999999], "action": "retry"}, follow=True
    )
    text = page.content.decode()
    assert "Retry, 2 selected: 1 requested, not run yet, 1 refused." in text
    assert "return_item (step-1) in storebot-return [f-1]: requested, not run yet" in text
    assert "#999999: refused: no such step in your projects" in text


def test_only_refusals_keep_the_refusals_status(shop: Project) -> None:
    response = login("operator", shop).post(
        "/steps/bulk/", {"step": [999999], "action": "retry"}, headers=HTMX
    )
    assert response.status_code == 404 and "1 refused" in response.content.decode()


def test_a_single_retry_that_failed_again_says_so(shop: Project, worker_runs_at_once: None) -> None:
    step = failing(shop)
    response = login("operator", shop).post(
        f"/steps/{step.pk}/action/", {"action": "retry"}, headers=HTMX
    )
    text = response.content.decode()
    assert "Retry failed: return_item (step-1) in storebot-return" in text
    assert "requested" not in text and 'role="alert"' in text


# ---------------------------------------------------------------- wording


def test_a_rejection_reads_rejected(shop: Project) -> None:
    approval = waiting(shop)
    Approval.objects.filter(pk=approval.pk).update(required=2)  # stays pending after one vote
    login("approver", shop, "ann").post(
        f"/approvals/{approval.pk}/decide/", {"decision": "approve", "reason": "fine"}
    )
    login("approver", shop, "bob").post(
        f"/approvals/{approval.pk}/decide/", {"decision": "reject", "reason": "no"}
    )
    page = login("viewer", shop).get("/sagas/shop/s-1/").content.decode()
    assert "approved by ann" in page and "rejected by bob" in page
    assert "rejectd" not in page


# ---------------------------------------------------------------- values as JSON


def test_json_text_keeps_stored_key_order_and_unicode() -> None:
    assert (
        json_text({"b": 1, "a": [True, None]})
        == '{\n  "b": 1,\n  "a": [\n    true,\n    null\n  ]\n}'
    )
    assert json_text({"k": "größe"}, indent=None) == '{"k": "größe"}'


def _no_repr(html: str) -> None:
    for python in ("True", "None", "&#x27;flag&#x27;", "{&#x27;"):
        assert python not in html, python


def test_inputs_and_outputs_read_as_json_on_every_page_and_fragment(shop: Project) -> None:
    approval = waiting(shop)
    Step.objects.filter(pk=approval.step_id).update(input=TRICKY, output={"ok": True, "n": None})
    client = login("approver", shop)
    saga = Saga.objects.get(pk=approval.saga_id)
    queue = client.get("/approvals/").content.decode()
    detail = client.get("/sagas/shop/s-1/").content.decode()
    live_detail = consumers._render_detail.func(saga.pk, 0)  # type: ignore[attr-defined]
    expected = json.dumps(TRICKY, indent=2, ensure_ascii=False)
    escaped = (
        expected.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        .replace('"', "&quot;").replace("'", "&#x27;")
    )  # fmt: skip
    queue_section = queue.split("refund_payment", 1)[1]
    assert escaped in queue_section
    assert "&quot;ok&quot;: true" in queue_section and "&quot;n&quot;: null" in queue_section
    assert "<b>bold</b>" not in queue
    _no_repr(queue_section)
    # The saga page draws them as JSON trees (sagaboard.ui.payloads): JSON's words, typed.
    for html in (detail, live_detail):
        section = html.split("refund_payment", 1)[1].split("Event log")[0]

        def leaf(path: str, key: str, value: str = "") -> str:
            head = f'<div class="jt-leaf" data-path="{path}"><span class="jt-key">{key}</span>'
            return head + ('<span class="jt-colon">:</span> ' + value if value else "")

        assert leaf("input.flag", "flag", '<span class="jt-boolean">true</span>') in section
        assert leaf("input.gone", "gone", '<span class="jt-null">null</span>') in section
        assert leaf("input.nested.deep.x", "x") in section
        assert leaf("output.ok", "ok", '<span class="jt-boolean">true</span>') in section
        assert "&lt;b&gt;bold&lt;/b&gt;" in section and "<b>bold</b>" not in html
        _no_repr(section)


def test_the_audit_log_and_its_csv_show_data_as_json(shop: Project) -> None:
    approval = waiting(shop)
    AuditEntry.objects.create(
        project=shop, actor="user:ann", action="policy.edit", target="policy:1",
        reason="why", data={"before": TRICKY, "after": {"enabled": False}},
    )  # fmt: skip
    login("approver", shop, "ann").post(
        f"/approvals/{approval.pk}/decide/", {"decision": "approve", "reason": "ok"}
    )
    admin = login("admin", shop)
    page = admin.get("/audit/").content.decode()
    assert "&quot;enabled&quot;: false" in page and "&quot;gone&quot;: null" in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold</b>" not in page
    _no_repr(page)
    export = admin.get("/audit/?format=csv")
    rows = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    data = {row[3]: row[6] for row in rows[1:]}
    assert json.loads(data["policy.edit"]) == {"before": TRICKY, "after": {"enabled": False}}
    assert data["policy.edit"].startswith('{"before": {"flag": true, "gone": null')
    assert json.loads(data["approval.approve"])["votes"] == 1


# ---------------------------------------------------------------- the saga on every item


def test_approval_items_and_attention_rows_show_their_saga_id_linked_and_escaped(
    shop: Project,
) -> None:
    hostile = 'r-<i>"x"</i>'
    approval = waiting(shop, "s-1")
    step = failing(shop, "f-1")
    Saga.objects.filter(pk=approval.saga_id).update(saga_id=hostile)
    Saga.objects.filter(pk=step.saga_id).update(saga_id=hostile + "-2")
    client = Client()
    client.force_login(person("root", "admin", shop))
    shown = "r-&lt;i&gt;&quot;x&quot;&lt;/i&gt;"
    link = 'href="/sagas/shop/r-%3Ci%3E%22x%22%3C/i%3E'
    queue = client.get("/approvals/").content.decode()
    item = queue.split(f'id="approval-{approval.pk}"')[1].split("</header>")[0]
    assert f"<code>{shown}</code>" in item and f'{link}/"' in item
    attention = client.get("/attention/").content.decode()
    row = attention.split(f'id="failure-{step.pk}"')[1].split("</li>")[0]
    assert f"<code>{shown}-2</code>" in row and f'{link}-2/"' in row
    assert "<i>" not in queue + attention


# ---------------------------------------------------------------- 404


@pytest.mark.parametrize("debug", [False, True])
def test_unknown_pages_answer_the_products_404_page(
    shop: Project, settings: Any, debug: bool
) -> None:
    settings.DEBUG = debug
    client = login("viewer", shop)
    for url in ("/no-such-page/", "/sagas/shop/no-such-saga/", "/approvals/x<b>/"):
        response = client.get(url)
        page = response.content.decode()
        assert response.status_code == 404, url
        assert "<h1>Not found</h1>" in page and 'class="brand"' in page, url  # our layout
        assert 'href="/">← Back to the sagas</a>' in page
        assert "URLconf" not in page and "<b>" not in page  # not Django's page; escaped
    anonymous = Client().get("/no-such-page/")
    assert anonymous.status_code == 404 and "Back to the sagas" in anonymous.content.decode()


@pytest.mark.parametrize("debug", [False, True])
def test_api_paths_keep_their_json_404(settings: Any, debug: bool) -> None:
    settings.DEBUG = debug
    response = Client().get("/api/v1/no-such-thing")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_refused_action_keeps_its_own_404_message(shop: Project, settings: Any) -> None:
    settings.DEBUG = True
    response = login("operator", shop).post(
        "/steps/999999/action/", {"action": "retry"}, headers=HTMX
    )
    assert (
        response.status_code == 404 and "no such step in your projects" in response.content.decode()
    )
    assert "<h1>Not found</h1>" not in response.content.decode()


@pytest.mark.parametrize("debug", [False, True])
async def test_unknown_pages_answer_the_products_404_page_under_asgi(
    settings: Any, debug: bool
) -> None:
    """The web processes serve ASGI: the same page through the async middleware chain."""
    from django.test import AsyncClient

    settings.DEBUG = debug
    response = await AsyncClient().get("/no-such-page/")
    page = response.content.decode()
    assert response.status_code == 404 and "<h1>Not found</h1>" in page
    assert "Back to the sagas" in page and "URLconf" not in page
    api = await AsyncClient().get("/api/v1/no-such-thing")
    assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"

"""The approval queue, the needs-attention page, policies and audit, as people use them."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sagaboard.actions.services import runner
from sagaboard.models import Approval, ApprovalPolicy, AuditEntry, Project, Saga, Step
from tests.support.hitl import login, storebot_server_saga, waiting

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def failing(shop: Project, saga_id: str = "f-1") -> Step:
    saga = storebot_server_saga(shop, saga_id, refund_needs_approval=False, return_fails_first=5)
    runner.rollback_continue(saga.pk)
    return Step.objects.get(saga=saga, tool_name="return_item", state="ROLLBACK_FAILED")


def test_the_queue_shows_what_an_approver_needs_to_decide(shop: Project) -> None:
    approval = waiting(shop)
    page = login("approver", shop).get("/approvals/").content.decode()
    assert f'id="approval-{approval.pk}"' in page
    assert "generate_label failed: FedEx API returned 500" in page  # why the rollback began
    assert "storebot.refund_payment" in page and "&quot;amount&quot;: 120" in page
    assert "&quot;refund&quot;: &quot;re_882&quot;" in page  # the step's output, as JSON


def test_approving_from_the_queue_decides_once(shop: Project) -> None:
    approval = waiting(shop)
    ann, cat = login("approver", shop, "ann"), login("approver", shop, "cat")
    url = f"/approvals/{approval.pk}/decide/"
    ok = ann.post(url, {"decision": "approve", "reason": "checked"}, headers=HTMX)
    assert ok.status_code == 200 and "approved" in ok.content.decode()
    late = cat.post(url, {"decision": "approve", "reason": "me too"}, headers=HTMX)
    assert late.status_code == 409 and "already decided: approved by ann" in late.content.decode()
    approval.refresh_from_db()
    assert approval.status == "APPROVED" and approval.votes.count() == 1


def test_an_approval_short_of_the_count_says_how_many_are_in_and_how_many_more_are_needed(
    shop: Project,
) -> None:
    approval = waiting(shop)
    Approval.objects.filter(pk=approval.pk).update(required=3)
    url = f"/approvals/{approval.pk}/decide/"
    first = login("approver", shop, "ann").post(url, {"decision": "approve", "reason": "ok"},
                                                headers=HTMX)  # fmt: skip
    said = "refund_payment (storebot-return): 1 of 3 approvals in; 2 more approvers needed."
    assert first.status_code == 200 and said in first.content.decode()
    second = login("approver", shop, "cat").post(url, {"decision": "approve", "reason": "ok"},
                                                 headers=HTMX)  # fmt: skip
    assert "2 of 3 approvals in; one more approver needed." in second.content.decode()


def test_a_decision_without_a_reason_is_refused_with_a_message(shop: Project) -> None:
    approval = waiting(shop)
    response = login("approver", shop).post(
        f"/approvals/{approval.pk}/decide/", {"decision": "reject", "reason": ""}, headers=HTMX
    )
    assert response.status_code == 400 and "a reason is required" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "PENDING"


def test_without_htmx_a_decision_redirects_back_with_the_message(shop: Project) -> None:
    approval = waiting(shop)
    client = login("approver", shop)
    page = client.post(
        f"/approvals/{approval.pk}/decide/", {"decision": "reject", "reason": "no"}, follow=True
    )
    assert page.redirect_chain[-1][0] == "/approvals/" and "rejected" in page.content.decode()


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_the_server_refuses_decisions_from_non_approvers(shop: Project, role: str) -> None:
    approval = waiting(shop)
    client = login(role, shop)
    response = client.post(
        f"/approvals/{approval.pk}/decide/", {"decision": "approve", "reason": "x"}, headers=HTMX
    )
    expected = 200 if role == "admin" else 403  # admin includes approver
    assert response.status_code == expected


def test_bulk_approve_decides_each_selected_item_with_one_reason(shop: Project) -> None:
    first, second = waiting(shop, "s-1"), waiting(shop, "s-2")
    client = login("approver", shop)
    response = client.post(
        "/approvals/bulk/",
        {"approval": [first.pk, second.pk], "decision": "approve", "reason": "batch ok"},
        headers=HTMX,
    )
    # Approved, and the undos only queued for a worker: requested, not "done".
    assert response.status_code == 200
    assert "Approve, 2 selected: 2 requested, not run yet." in response.content.decode()
    assert set(Approval.objects.values_list("status", flat=True)) == {"APPROVED"}
    again = client.post(
        "/approvals/bulk/",
        {"approval": [first.pk], "decision": "reject", "reason": "changed mind"},
        headers=HTMX,
    )
    assert again.status_code == 409 and "already decided" in again.content.decode()


def test_the_attention_page_groups_failures_and_retries_them(shop: Project) -> None:
    one, two = failing(shop, "f-1"), failing(shop, "f-2")
    client = login("operator", shop)
    page = client.get("/attention/").content.decode()
    assert "return_item" in page and "Retry all 2" in page
    response = client.post(
        "/steps/bulk/", {"step": [one.pk, two.pk], "action": "retry", "expected": "2"}, headers=HTMX
    )
    assert response.status_code == 200
    assert "Retry, 2 selected: 2 requested, not run yet." in response.content.decode()
    assert all(s.pending_action for s in Step.objects.filter(pk__in=[one.pk, two.pk]))


def test_a_bulk_action_on_a_changed_selection_does_nothing(shop: Project) -> None:
    one, two = failing(shop, "f-1"), failing(shop, "f-2")
    response = login("operator", shop).post(
        "/steps/bulk/", {"step": [one.pk, two.pk], "action": "retry", "expected": "3"}, headers=HTMX
    )
    assert response.status_code == 409 and "selection changed" in response.content.decode()
    assert not Step.objects.filter(pending_action__isnull=False).exists()


def test_resolving_from_the_page_needs_a_reason(shop: Project) -> None:
    step = failing(shop)
    client = login("operator", shop)
    refused = client.post(f"/steps/{step.pk}/action/", {"action": "resolve"}, headers=HTMX)
    assert refused.status_code == 400 and "a reason is required" in refused.content.decode()
    done = client.post(
        f"/steps/{step.pk}/action/", {"action": "resolve", "reason": "fixed by hand"}, headers=HTMX
    )
    assert done.status_code == 200
    step.refresh_from_db()
    assert step.pending_action["action"] == "resolve"


def test_an_approver_cannot_retry(shop: Project) -> None:
    step = failing(shop)
    response = login("approver", shop).post(
        f"/steps/{step.pk}/action/", {"action": "retry"}, headers=HTMX
    )
    assert response.status_code == 403


def test_the_saga_page_shows_the_compensation_plan(shop: Project) -> None:
    approval = waiting(shop)
    saga = Saga.objects.get(pk=approval.saga_id)
    page = login("viewer", shop).get(f"/sagas/shop/{saga.saga_id}/").content.decode()
    assert "Compensation plan" in page
    assert "step-2 · refund_payment</strong> — waits for approval" in page
    assert "step-1 · return_item</strong> — will run unattended" in page
    assert "step-3 · generate_label</strong> — nothing to undo: it did not run" in page


def test_agent_text_in_the_queue_is_escaped(shop: Project) -> None:
    approval = waiting(shop)
    Step.objects.filter(pk=approval.step_id).update(input={"note": XSS})
    Saga.objects.filter(pk=approval.saga_id).update(name=XSS)
    page = login("approver", shop).get("/approvals/").content.decode()
    assert "<script>alert" not in page and "<img src=x" not in page


def test_an_admin_creates_and_edits_a_policy_and_it_is_audited(shop: Project) -> None:
    client = login("admin", shop)
    form = {
        "project": "shop", "name": "big refunds", "tool_glob": "refund_*",
        "condition": "input.amount > 100", "approvers_required": "2", "enabled": "1",
    }  # fmt: skip
    assert client.post("/policies/", form).status_code == 302
    policy = ApprovalPolicy.objects.get()
    assert (policy.approvers_required, policy.version, policy.enabled) == (2, 1, True)
    edited = client.post(f"/policies/{policy.pk}/", {**form, "approvers_required": "1",
                                                    "reason": "too slow"})  # fmt: skip
    assert edited.status_code == 302
    policy.refresh_from_db()
    assert (policy.approvers_required, policy.version) == (1, 2)
    entry = AuditEntry.objects.get(action="policy.edit")
    assert entry.reason == "too slow" and entry.data["before"]["approvers_required"] == 2


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("condition", "__import__('os')", "call is not allowed"),
        ("condition", "input.amount >", "not a valid expression"),
        ("condition", "secrets.x == 1", "unknown name &#x27;secrets&#x27;"),
        ("approvers_required", "3", "1, or 2 for four eyes"),
        ("timeout_seconds", "5", "60 to"),
        ("name", "", "a name of 1 to 100 characters is required"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(
    shop: Project, field: str, value: str, message: str
) -> None:
    form = {"project": "shop", "name": "p", "tool_glob": "*", "approvers_required": "1"}
    response = login("admin", shop).post("/policies/", {**form, field: value})
    assert response.status_code == 400 and message in response.content.decode()
    assert not ApprovalPolicy.objects.exists()


def test_an_approver_cannot_edit_policies(shop: Project) -> None:
    client = login("approver", shop)
    assert client.get("/policies/").status_code == 200  # may read the rules
    response = client.post("/policies/", {"project": "shop", "name": "p"})
    assert response.status_code == 403 and not ApprovalPolicy.objects.exists()


def test_the_audit_page_filters_and_exports_csv(shop: Project) -> None:
    approval = waiting(shop)
    ann = login("approver", shop, "ann")
    ann.post(f"/approvals/{approval.pk}/decide/", {"decision": "approve", "reason": "=1+1"})
    admin = login("admin", shop)
    page = admin.get("/audit/?user=ann&action=approval.").content.decode()
    assert "approval.approve" in page and "approval.requested" not in page
    export = admin.get("/audit/?user=ann&format=csv")
    rows = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert rows[0][:4] == ["at", "project", "actor", "action"]
    assert rows[1][2:4] == ["user:ann", "approval.approve"]
    assert rows[1][5] == "'=1+1"  # a formula is not run by a spreadsheet
    assert login("approver", shop, "zed").get("/audit/").status_code == 403


def test_the_audit_page_shows_each_chain_verifies_and_where_one_breaks(shop: Project) -> None:
    approval = waiting(shop)
    login("approver", shop, "ann").post(
        f"/approvals/{approval.pk}/decide/", {"decision": "approve", "reason": "ok"}
    )
    admin = login("admin", shop)
    page = admin.get("/audit/").content.decode()
    assert "shop: the chain verifies" in page and "fully verified" in page
    entry = AuditEntry.objects.filter(project=shop, action="approval.approve").get()
    with connection.cursor() as cursor:  # an intruder with database access
        cursor.execute(
            "UPDATE sagaboard_auditentry SET reason = 'nothing to see' WHERE id = %s", [entry.pk]
        )
    cache.clear()  # the page's next whole-chain check (every few minutes) comes now
    page = admin.get("/audit/").content.decode()
    assert "shop: the chain is broken" in page
    assert f"#{entry.pk}</a> (number {entry.seq}): altered" in page


def test_anonymous_users_reach_none_of_the_work_pages(client: Any) -> None:
    for url in ("/approvals/", "/attention/", "/policies/", "/audit/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert client.post("/approvals/1/decide/", {}).status_code == 302


def test_the_queue_and_a_saga_page_cost_the_same_queries_however_much_is_stored(
    shop: Project, django_assert_num_queries: Any, django_assert_max_num_queries: Any
) -> None:
    client = login("approver", shop)
    waiting(shop, "s-0")
    page_urls = ("/approvals/", "/sagas/shop/s-0/")
    counts = {}
    for url in page_urls:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200
        counts[url] = len(ctx.captured_queries)
    for n in range(1, 6):  # more waiting, and a failed undo with its attempts
        waiting(shop, f"s-{n}")
    failing(shop)
    assert Approval.objects.filter(status="PENDING").count() == 6
    for url in page_urls:
        with django_assert_num_queries(counts[url]):
            assert client.get(url).status_code == 200
    # A saga with attempts to show and no approval: no more (one less: no votes to fetch).
    with django_assert_max_num_queries(counts["/sagas/shop/s-0/"]):
        assert client.get("/sagas/shop/f-1/").status_code == 200

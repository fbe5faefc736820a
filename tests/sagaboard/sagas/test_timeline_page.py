"""The saga page's timeline and the permalinks, as rendered: one bar per run and per undo
attempt, waits drawn, every link's target on the page, no database keys in anchors, an
approval's and an audit entry's own addresses."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from sagaboard.actions.services import runner
from sagaboard.approvals.services import approvals
from sagaboard.live import fragments
from sagaboard.models import Approval, AuditEntry, CompensationAttempt, Project, Saga, Step
from tests.support.hitl import login, person, storebot_server_saga, waiting
from tests.support.timeline_sagas import big_saga

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def chart(page: str) -> str:
    return page[
        page.index('<svg class="timeline-chart"') : page.index(
            "</svg>", page.index('<svg class="timeline-chart"')
        )
    ]


def bars(page: str, kind: str) -> list[str]:
    return re.findall(rf'<a href="[^"]*" class="bar {kind}[^"]*" aria-label="[^"]*">', chart(page))


def ids(page: str) -> set[str]:
    return set(re.findall(r' id="([^"]+)"', page))


def test_every_step_and_undo_attempt_is_a_bar_that_leads_to_its_step_card(shop: Project) -> None:
    saga = big_saga(shop, "big-1", 40)
    page = login("viewer", shop).get("/sagas/shop/big-1/").content.decode()
    assert len(bars(page, "run")) == 40
    assert len(bars(page, "undo")) == CompensationAttempt.objects.filter(step__saga=saga).count()
    hrefs = set(re.findall(r'<a href="#([^"]+)" class="bar', page))
    assert hrefs == {f"step-step-{i}" for i in range(1, 41)}
    assert hrefs <= ids(page)  # every bar's target is on the page
    # Old anchors by database key are gone: a step card's id is its step id.
    assert not re.search(r'id="step-\d+"', page)
    for step in Step.objects.filter(saga=saga):
        assert f'<li id="step-{step.step_id}" class="step"' in page


def test_waits_for_people_are_drawn_as_such(shop: Project) -> None:
    big_saga(shop, "big-1", 40)  # step-20's undo failed twice; step-21 waited for an approval
    page = login("viewer", shop).get("/sagas/shop/big-1/").content.decode()
    (approval,) = bars(page, "wait wait-approval")
    assert 'href="#step-step-21"' in approval and "waited 30 s for approval" in approval
    (operator,) = bars(page, "wait wait-operator")
    assert 'href="#step-step-20"' in operator and "waiting for an operator for" in operator
    # Still waiting: the saga is live, the now-line drawn, the open wait stretched by the script.
    assert 'data-live="1"' in page and '<line class="now-line"' in page
    assert re.search(r'<rect [^>]*data-open="1"/></a>', chart(page))
    # Each bar says what it is in its accessible name, in text: no colour-only meaning.
    assert 'aria-label="step-20 import_row_0: undo attempt 2, 2 ms, failed"' in page


def test_a_saga_waiting_for_an_approval_shows_the_wait_until_now(shop: Project) -> None:
    pending = waiting(shop)
    page = login("viewer", shop).get("/sagas/shop/s-1/").content.decode()
    (wait,) = bars(page, "wait wait-approval")
    assert f'href="#step-{pending.step.step_id}"' in wait and "waiting for approval for" in wait
    assert 'data-live="1"' in page


def test_a_finished_saga_has_no_now_line_and_its_cards_say_how_long_each_step_took(
    shop: Project,
) -> None:
    saga = storebot_server_saga(shop, "c-1", refund_needs_approval=False)
    runner.rollback_continue(saga.pk)
    assert Saga.objects.get(pk=saga.pk).status == "ROLLED_BACK"
    page = login("viewer", shop).get("/sagas/shop/c-1/").content.decode()
    assert "now-line" not in page and "data-live" not in page
    assert re.search(r'<span class="took">ran [0-9.<]+ (ms|s)</span>', page)
    assert re.search(r'<span class="took">undo [0-9.<]+ (ms|s), 1 attempt</span>', page)


def test_a_hostile_step_id_is_escaped_and_still_finds_its_card(shop: Project) -> None:
    saga = big_saga(shop, "h-1", 3)
    Step.objects.filter(saga=saga, step_id="step-2").update(step_id='"><b>x</b> #%')
    page = login("viewer", shop).get("/sagas/shop/h-1/").content.decode()
    anchor = "step-%22%3E%3Cb%3Ex%3C%2Fb%3E%20%23%25"
    assert f'<li id="{anchor}" class="step"' in page and f'href="#{anchor}"' in page
    assert "<b>x</b>" not in page
    assert 'aria-label="&quot;&gt;&lt;b&gt;x&lt;/b&gt; #% import_row_2: ' in page


def test_the_live_update_carries_the_timeline_too(shop: Project) -> None:
    saga = big_saga(shop, "l-1", 5)
    body = fragments.saga_detail(saga.pk, 1)
    assert body.count('class="bar run') == 5 and 'id="step-step-5"' in body


@pytest.mark.slow  # a thousand steps stored and rendered
def test_a_thousand_steps_render_in_a_bounded_number_of_queries(shop: Project) -> None:
    big_saga(shop, "big-1", 1000)
    client = login("viewer", shop)
    with CaptureQueriesContext(connection) as queries:
        page = client.get("/sagas/shop/big-1/").content.decode()
    assert len(bars(page, "run")) == 1000
    assert len(queries) < 25, [q["sql"][:80] for q in queries]


# ---------------------------------------------------------------- permalinks


def test_copy_link_controls_carry_the_permalinks(shop: Project) -> None:
    pending = waiting(shop)
    page = login("viewer", shop).get("/sagas/shop/s-1/").content.decode()
    assert 'data-copy-url="/sagas/shop/s-1/" aria-label="Copy link to this saga">Copy link<' in page
    assert 'data-copy-text="s-1" aria-label="Copy id (s-1)">Copy id<' in page
    step_id = pending.step.step_id
    assert f'data-copy-url="/sagas/shop/s-1/#step-{step_id}"' in page
    assert f'data-copy-url="/approvals/{pending.pk}/"' in page
    assert f'id="approval-{pending.pk}"' in page


def test_an_approval_permalink_leads_to_its_record_decided_or_not(shop: Project) -> None:
    pending = waiting(shop)
    client = login("viewer", shop)
    answer = client.get(f"/approvals/{pending.pk}/")
    assert (
        answer.status_code == 302
        and answer["Location"] == f"/sagas/shop/s-1/#approval-{pending.pk}"
    )
    approver = person("ann", "approver", shop)
    approvals.approval_decide(approval_id=pending.pk, user=approver, decision="reject", reason="no")
    assert Approval.objects.get(pk=pending.pk).status != "PENDING"
    assert client.get(f"/approvals/{pending.pk}/")["Location"].endswith(f"#approval-{pending.pk}")
    page = client.get("/sagas/shop/s-1/").content.decode()
    assert f'id="approval-{pending.pk}"' in page  # the decided approval's record is still there
    for missing in (pending.pk + 1000, 2**70):
        assert client.get(f"/approvals/{missing}/").status_code == 404


def test_an_approval_outside_your_projects_has_no_permalink_for_you(shop: Project) -> None:
    pending = waiting(shop)
    other = Project.objects.create(slug="other", name="Other")
    assert login("viewer", other, "outsider").get(f"/approvals/{pending.pk}/").status_code == 404
    assert Client().get(f"/approvals/{pending.pk}/").status_code == 302  # to log in


def test_the_queues_link_to_the_step_by_its_step_id(shop: Project) -> None:
    pending = waiting(shop)
    queue = login("approver", shop).get("/approvals/").content.decode()
    assert f'href="/sagas/shop/s-1/#step-{pending.step.step_id}"' in queue
    assert f'href="/approvals/{pending.pk}/"' in queue
    failing = storebot_server_saga(shop, "f-1", refund_needs_approval=False, return_fails_first=9)
    runner.rollback_continue(failing.pk)
    stuck = Step.objects.get(saga=failing, state="ROLLBACK_FAILED")
    attention = login("operator", shop, "op").get("/attention/").content.decode()
    assert f'href="/sagas/shop/f-1/#step-{stuck.step_id}"' in attention


def test_an_audit_entry_has_a_permalink_that_shows_that_one_entry(shop: Project) -> None:
    admin = person("root", "admin", shop)
    first = AuditEntry.objects.create(
        actor="ann", action="policy.saved", project=shop, target="p-1"
    )
    AuditEntry.objects.create(actor="bob", action="policy.saved", project=shop, target="p-2")
    client = Client()
    client.force_login(admin)
    page = client.get("/audit/").content.decode()
    assert f'<tr id="entry-{first.pk}">' in page
    assert f'href="/audit/?entry={first.pk}#entry-{first.pk}"' in page
    one = unescape(client.get(f"/audit/?entry={first.pk}").content.decode())
    assert "p-1" in one and "p-2" not in one
    for bad in ("x", "-1", "0", "1e3", "٣", str(2**70)):
        answer = client.get("/audit/", {"entry": bad})
        assert answer.status_code == 400 and b"entry" in answer.content, bad
    assert AuditEntry.objects.count() == 2

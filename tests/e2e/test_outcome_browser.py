"""Statuses and plans say what will really happen, in real headless Chromium (Debian's, driven
by Playwright) against a real uvicorn server (undos run in the server process: no worker).

Three StoreBot sagas run by sagaboard (``sagaboard.demo.flows.storebot_server_saga``): one whose
refund undo an approver rejected, one rolled back cleanly, and one stored with a refund undo
of kind ``client`` (which only an agent can run; the API refuses such a step today, so it is
written into the database as a saga kept from before) waiting for approval. An approver (ann)
sees the rejected one as "ROLLED BACK with exceptions (1 rejected)", not green, on the list,
finds it with the list's outcome filter and counted apart on the overview; the waiting one says
"waiting for a person"; its saga page's plan says "waits for an operator: <why>" before anyone
approves, and so do the approval queue and its approve button. Screenshots:
test-artifacts/outcome-list.png, outcome-plan.png and outcome-queue.png.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.chromium import Tab, chromium
from tests.support.live_server import DEMO_UNDOS, ROOT, Server, manage, temp_database

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
WAIT_MS = 15_000
PASSWORD = "pw-outcome-e2e-1618"
CLIENT_UNDO = "waits for an operator: the undo of 'refund_payment' lives in the agent's process"

MAKE_SAGAS = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sagaboard.actions.services import runner
from sagaboard.approvals.services import approvals
from sagaboard.demo.flows import storebot_server_saga
from sagaboard.models import Approval, Project, Saga, Step

project = Project.objects.create(slug="shop", name="Shop")
ann = get_user_model().objects.create_user("ann", password={PASSWORD!r})
ann.groups.add(Group.objects.get(name="approver"))
project.members.add(ann)

rejected = storebot_server_saga(project, "rejected-1")
runner.rollback_continue(rejected.pk)
pending = Approval.objects.get(saga=rejected, status="PENDING")
approvals.approval_decide(
    approval_id=pending.pk, user=ann, decision="reject", reason="the refund stands"
)
runner.rollback_continue(rejected.pk)  # the task ran already (eager): nothing left to do
assert Saga.objects.get(pk=rejected.pk).status == "ROLLED_BACK"

clean = storebot_server_saga(project, "clean-1", refund_needs_approval=False)
runner.rollback_continue(clean.pk)
assert Saga.objects.get(pk=clean.pk).status == "ROLLED_BACK"

stored = storebot_server_saga(project, "stored-1")
Step.objects.filter(saga=stored, tool_name="refund_payment").update(undo={{"kind": "client"}})
runner.rollback_continue(stored.pk)
assert Saga.objects.get(pk=stored.pk).waiting_for == "APPROVAL"
"""


@dataclass
class Site:
    url: str


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with temp_database("postgres" if PG else "sqlite", tmp_path_factory.mktemp("e2e-out")) as url:
        manage(url, "migrate", "--no-input", "-v0")
        env = {**DEMO_UNDOS, **os.environ, "DATABASE_URL": url, "SAGABOARD_TASKS_EAGER": "1"}
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", MAKE_SAGAS],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, f"manage.py shell failed:\n{done.stdout}\n{done.stderr}"
        with Server(url, debug=False, env={"SAGABOARD_TASKS_EAGER": "1"}) as server:
            yield Site(server.url)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(WAIT_MS) as launched:
        yield launched


@pytest.fixture
def ann(browser: Any, site: Site) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(site.url + "/login/")
    page.fill("input[name=username]", "ann")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#saga-rows")
    yield page
    assert errors == [], errors
    context.close()


def row(page: Any, saga_id: str) -> Any:
    return page.locator("#saga-rows tr").filter(has_text=saga_id)


def test_a_rejected_undo_reads_as_with_exceptions_and_the_plan_says_cannot_run_here(
    site: Site, ann: Any
) -> None:
    from playwright.sync_api import expect

    tab = Tab(ann)
    badge = row(ann, "rejected-1").locator("td > .status")
    expect(badge).to_have_text("ROLLED BACK with exceptions (1 rejected)")
    expect(badge).to_have_class("status status-rolled_back_with_exceptions")
    green = row(ann, "clean-1").locator("td > .status").evaluate("el => getComputedStyle(el).color")
    assert badge.evaluate("el => getComputedStyle(el).color") != green  # never the clean colour
    expect(row(ann, "clean-1").locator("td > .status")).to_have_text("ROLLED_BACK")
    expect(row(ann, "stored-1").locator(".waiting")).to_have_text(
        "waiting for a person: an approver"
    )
    tab.screenshot("outcome-list.png")

    # The list's outcome filter finds it; the overview counts it apart from clean rollbacks.
    ann.locator("details.filter-panel > summary").click()  # the filters are folded
    ann.select_option("select[name=outcome]", "WITH_EXCEPTIONS")
    ann.click("form.filters button[type=submit]")
    expect(ann.locator("#saga-rows tr")).to_have_count(1)
    expect(row(ann, "rejected-1")).to_have_count(1)
    ann.goto(site.url + "/overview/")
    chips = ann.locator("ul.chips li")
    expect(chips.filter(has_text="ROLLED BACK with exceptions")).to_contain_text("1")
    expect(chips.filter(has_text="ROLLED_BACK (clean)")).to_contain_text("1")
    expect(chips.filter(has_text="waiting for a person")).to_contain_text("1")

    # The stored saga's plan says the refund's undo cannot run, before anyone approves.
    ann.goto(site.url + "/sagas/shop/stored-1/")
    unrunnable = ann.locator("ol.plan li.cannot-run")
    expect(unrunnable).to_have_count(1)
    expect(unrunnable).to_contain_text("step-2 · refund_payment")
    expect(unrunnable).to_contain_text(CLIENT_UNDO)
    expect(ann.locator("ol.plan")).not_to_contain_text("refund_payment — will")
    tab.screenshot("outcome-plan.png")

    # And the approval queue: the item says it, and so does its approve button.
    ann.goto(site.url + "/approvals/")
    item = ann.locator("#approval-items li.approval")  # stored-1's refund: the only one
    expect(item).to_have_count(1)
    expect(item.locator(".cannot-run")).to_contain_text(
        "Cannot run here: the undo of 'refund_payment' lives"
    )
    expect(item).not_to_contain_text("The agent runs the undo")  # no agent runs this saga
    approve = item.get_by_role("button", name="Approve (it cannot run here: it will fail)")
    expect(approve).to_be_visible()
    tab.screenshot("outcome-queue.png")

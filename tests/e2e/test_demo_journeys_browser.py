"""The demo, as `make run` serves it, walked in headless Chromium: the chains of actions an
on-call operator and two approvers take on it (issue 31), each ending as the page's plan said.

One site per module, set up as ``make run`` does: the embedded default (SQLite, or
PostgreSQL when ``DATABASE_URL`` says so), the demo loaded by ``manage.py sagaboard_demo``,
a Celery worker with its beat on the filesystem broker under the site's own var/ folder (no
Redis), the web process with DEBUG on, and the demo agent (``manage.py
sagaboard_demo_agent``) posting over HTTP. Each test acts on demo sagas no other test
touches, so the tests do not depend on their order (pytest-xdist may give each worker a site
of its own). No page logs a console error. Screenshots land in test-artifacts/.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.chromium import ARTIFACTS, chromium
from tests.support.live_server import (
    DEMO_UNDOS,
    LIVE_SECRET_KEY,
    ROOT,
    Server,
    Worker,
    manage,
    temp_database,
)

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
WAIT_MS = 20_000
WIDE, PHONE = 1280, 390

MAKE_FAILED = """
from sagaboard.demo.flows import demo_project, storebot_server_saga
from sagaboard.actions.services import runner
for saga_id in ("batch-a", "batch-b"):
    saga = storebot_server_saga(demo_project(), saga_id, refund_needs_approval=False,
                                return_fails_first=2, item=saga_id[-1])
    runner.rollback_continue(saga.pk)
"""
"""Two failed returns for the batch test alone: each retry's first attempt fails again."""


@dataclass
class Site:
    url: str
    env: dict[str, str]
    agent_log: Path
    worker: Worker


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    work = tmp_path_factory.mktemp("e2e-demo")
    with temp_database("postgres" if PG else "sqlite", work) as url:
        env = {
            **DEMO_UNDOS,
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "sagaboard.config.settings",
            "SAGABOARD_DEBUG": "1",  # make run's
            "SAGABOARD_VAR_DIR": str(work / "var"),  # the filesystem broker lives here
            "CELERY_BROKER_URL": "",
            "REDIS_URL": "",
            "SAGABOARD_SECRET_KEY": LIVE_SECRET_KEY,
            "SAGABOARD_TASKS_EAGER": "0",
        }
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # for manage(): it runs with os.environ
        try:
            manage(url, "migrate", "--no-input", "-v0")
            manage(url, "sagaboard_demo")
            manage(url, "shell", "-c", MAKE_FAILED)
            worker = Worker("demo", {**os.environ, **env}, work, beat=True)
            server = Server(url, debug=True, env=env)
            agent_log = work / "agent.log"
            try:
                server.start()
                worker.wait_ready()
                with agent_log.open("wb") as out:
                    agent = subprocess.Popen(
                        [sys.executable, "manage.py", "sagaboard_demo_agent", "--url", server.url,
                         "--think-seconds", "0.5", "--pause-seconds", "2"],
                        cwd=ROOT, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                    )  # fmt: skip
                try:
                    yield Site(server.url, env, agent_log, worker)
                finally:
                    agent.terminate()
                    agent.wait(timeout=30)
            finally:
                server.stop()
                worker.stop()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@dataclass
class Person:
    page: Any
    errors: list[str]
    dialogs: list[str]

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=True)


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium(WAIT_MS) as found:
        yield found


def log_in(browser: Any, site: Site, username: str, width: int) -> Person:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    person = Person(page, [], [])
    page.on("console", lambda m: person.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: person.errors.append(str(e)))

    def accept(dialog: Any) -> None:
        person.dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    page.goto(site.url + "/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"{username}-demo")
    page.click("button[type=submit]")
    page.wait_for_selector("#saga-rows")
    return person


def saga_page(person: Person, site: Site, saga_id: str) -> Any:
    person.page.goto(f"{site.url}/sagas/demo/{saga_id}/")
    return person.page


def plan_line(page: Any, tool: str) -> str:
    """The compensation plan's line for ``tool``, as the operator reads it before acting."""
    text: str = page.locator("main").inner_text().split("Compensation plan", 1)[1]
    return next(line for line in text.splitlines() if f"· {tool} —" in line)


def status(page: Any) -> Any:
    return page.locator("h1 > .status")


def visible_messages(page: Any) -> Any:
    return page.locator("main .message:visible, main .banner:visible")


# ---------------------------------------------------------------- the operator


def test_an_operator_stops_retries_and_force_resolves_on_the_demo_each_as_the_plan_said(
    site: Site, browser: Any
) -> None:
    """At 1280 px: stop the running checkout; retry the failing return twice (fails again,
    then undone); force-resolve the stuck refund, after which the worker undoes the return."""
    from playwright.sync_api import expect

    olga = log_in(browser, site, "olga", WIDE)
    page = saga_page(olga, site, "demo-checkout-running")
    assert "will run unattended" in plan_line(page, "deduct_inventory")
    page.fill("#stop-reason", "customer called to cancel")
    page.get_by_role("button", name="Request rollback").click()
    expect(status(page)).to_have_text("ROLLED_BACK")
    expect(page.locator("#stop-state")).to_contain_text("(carried out)")
    expect(page.locator(".banner.error")).to_have_count(0)
    olga.shot("demo-journey-stopped-1280.png")

    page = saga_page(olga, site, "demo-return-failing")
    step = page.locator("ol.timeline > li.step").filter(
        has=page.locator("h3", has_text="· return_item")
    )
    step.get_by_role("button", name="Retry undo").click()
    expect(page.locator("#flash")).to_contain_text("Retry failed: return_item (step-1)")
    expect(page.locator("#flash")).to_contain_text("(attempt 2)")
    expect(page.locator("#flash")).to_have_class("message error")
    step.get_by_role("button", name="Retry undo").click()
    expect(status(page)).to_have_text("ROLLED_BACK")
    expect(step.locator("table.attempts tbody tr")).to_have_count(3)
    expect(step.locator("table.attempts tbody tr").nth(2)).to_contain_text("succeeded")
    # One message, the second retry's: the first one's red "Retry failed" is gone.
    expect(page.locator("#flash")).to_contain_text("Retry done: return_item (step-1)")
    expect(page.locator("#flash")).to_have_class("message success")

    page = saga_page(olga, site, "demo-refund-stuck")
    assert "will run unattended" in plan_line(page, "return_item")  # what goes on after
    refund = page.locator("ol.timeline > li.step").filter(
        has=page.locator("h3", has_text="· refund_payment")
    )
    refund.locator("form.act [name=reason]").first.fill("refund reversed in Stripe by hand")
    refund.get_by_role("button", name="Force-resolve").click()
    expect(status(page)).to_contain_text("ROLLED BACK with exceptions (1 resolved by hand)")
    states = page.locator("ol.timeline > li.step .status")
    expect(states).to_have_text(["ROLLED_BACK", "RESOLVED", "FAILED"])
    assert any("handled by hand" in d for d in olga.dialogs), olga.dialogs
    olga.shot("demo-journey-resolved-1280.png")
    assert olga.errors == []


def test_a_stop_of_the_demo_agents_checkout_runs_the_agents_own_undos(
    site: Site, browser: Any
) -> None:
    from playwright.sync_api import expect

    olga = log_in(browser, site, "olga", PHONE)
    page = olga.page
    page.goto(site.url + "/?q=agent-checkout&status=IN_PROGRESS")
    link = page.locator("#saga-rows a[href*='/agent-checkout-']").first
    saga_id = link.get_attribute("href").rstrip("/").rsplit("/", 1)[1]
    page = saga_page(olga, site, saga_id)
    assert "runs in the agent" in plan_line(page, "reserve_stock")
    page.fill("#stop-reason", "wrong address")
    page.get_by_role("button", name="Request rollback").click()
    expect(status(page)).to_have_text("ROLLED_BACK")
    expect(page.locator("#stop-state")).to_contain_text("(carried out)")
    olga.shot("demo-journey-agent-stopped-390.png")
    # At 390 px the page, its event log included, fits the screen: nothing scrolls sideways.
    wide = page.evaluate(
        "[document.documentElement, ...document.querySelectorAll('.table-scroll')]"
        ".filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.getAttribute('aria-label'))"
    )
    assert wide == [], wide
    said = f"checkout {saga_id} ROLLED_BACK: stopped by user:olga (wrong address)"
    deadline = time.monotonic() + 20
    while said not in site.agent_log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    log = site.agent_log.read_text()
    assert said in log, log[-3000:]
    assert "undo reserve_stock" in log.split(f"rolling back {saga_id}", 1)[1]
    assert olga.errors == []


def test_a_batch_retry_over_a_filter_reports_what_each_retry_did(site: Site, browser: Any) -> None:
    """The job is finished only once each retry's undo has ended: the first batch's two
    retries fail again (attempt 2), the second's undo both."""
    from playwright.sync_api import expect

    olga = log_in(browser, site, "olga", WIDE)
    page = olga.page
    for expected in ("2 failed again", "2 undone"):
        page.goto(site.url + "/attention/")
        page.locator("details.batch-filter summary").click()
        page.locator("details.batch-filter select[name=action]").select_option("retry")
        page.locator("details.batch-filter input[name=q]").fill("batch-")
        page.get_by_role("button", name="Review all matching…").click()
        expect(page.locator("main")).to_contain_text("Retry all 2")
        page.locator("main [name=reason]").first.fill("upstream back")
        page.get_by_role("button", name="Retry all 2").click()
        expect(page.locator("main")).to_contain_text("Progress: finished")
        expect(page.locator("main")).to_contain_text("2 of 2 outcomes known (100%)")
        counts = page.locator("main").inner_text()
        number, word = expected.split(" ", 1)
        assert f"{number}\n{word}" in counts or expected in counts, counts[:800]
        # Each item says its own outcome, live, as the counts do (never "not started yet").
        items = page.locator("#batch-items tbody tr")
        expect(items).to_have_count(2)
        for row in range(2):
            expect(items.nth(row)).to_contain_text(word)
    olga.shot("demo-journey-batch-1280.png")
    for saga_id in ("batch-a", "batch-b"):
        expect(status(saga_page(olga, site, saga_id))).to_have_text("ROLLED_BACK")
    assert olga.errors == []


# ---------------------------------------------------------------- two approvers


def queue_item(page: Any, saga_id: str) -> Any:
    return page.locator("#approval-items > li", has=page.locator("a.saga-id", has_text=saga_id))


def test_two_approvers_approve_and_reject_the_demos_refunds_and_see_each_other_live(
    site: Site, browser: Any
) -> None:
    """anna at 1280 px and amir at 390 px, side by side: anna approves one refund and rejects
    another; the refund over 1,000 needs both of them; each queue follows the other's
    decisions without a reload; the note anna writes and her taking the saga show on amir's
    open page of it without a reload, as text, and his own draft is kept."""
    from playwright.sync_api import expect

    anna = log_in(browser, site, "anna", WIDE)
    amir = log_in(browser, site, "amir", PHONE)
    for person in (anna, amir):
        person.page.goto(site.url + "/approvals/")

    def decide(person: Person, saga_id: str, button: str, reason: str) -> None:
        item = queue_item(person.page, saga_id)
        item.locator("input[name=reason]").fill(reason)
        item.get_by_role("button", name=button).click()

    decide(anna, "demo-refund-queued-1", "Approve undo", "checked the order")
    expect(anna.page.locator("#flash")).to_contain_text("approved")
    expect(queue_item(amir.page, "demo-refund-queued-1")).to_have_count(0)  # live
    decide(anna, "demo-refund-queued-2", "Reject", "the refund stands")
    expect(anna.page.locator("#flash")).to_contain_text("rejected")
    expect(queue_item(amir.page, "demo-refund-queued-2")).to_have_count(0)
    decide(anna, "demo-refund-two-approvers", "Approve undo", "first of two")
    expect(anna.page.locator("#flash")).to_contain_text(
        "1 of 2 approvals in; one more approver needed"
    )
    expect(queue_item(amir.page, "demo-refund-two-approvers")).to_contain_text("1 of 2")
    decide(amir, "demo-refund-two-approvers", "Approve undo", "second of two")
    expect(amir.page.locator("#flash")).to_contain_text("approved")
    expect(queue_item(anna.page, "demo-refund-two-approvers")).to_have_count(0)
    amir.shot("demo-journey-approvals-390.png")

    outcomes = {
        "demo-refund-queued-1": "ROLLED_BACK",
        "demo-refund-queued-2": "ROLLED BACK with exceptions (1 rejected)",
        "demo-refund-two-approvers": "ROLLED_BACK",
    }
    for saga_id, shown in outcomes.items():
        expect(status(saga_page(anna, site, saga_id))).to_have_text(shown)

    # Notes and the owner, live in the other window: amir has the saga open and is typing a
    # note of his own when anna writes hers and takes the saga; his page shows both without
    # a reload (his section is read again for him: its edit buttons are per person), and
    # what he was typing is still there.
    page = saga_page(anna, site, "demo-refund-two-approvers")
    saga_page(amir, site, "demo-refund-two-approvers")
    amir.page.fill("#note-new", "my draft")
    page.fill("#note-new", "Refund over 1,000 checked by **both** of us <script>x()</script>")
    page.get_by_role("button", name="Add note").click()
    expect(page.locator("li.note strong", has_text="both")).to_have_count(1)
    expect(amir.page.locator("li.note strong", has_text="both")).to_have_count(1)  # live
    expect(amir.page.locator("li.note")).to_contain_text("<script>x()</script>")  # as text
    expect(amir.page.locator("li.note").get_by_role("button", name="Delete")).to_have_count(0)
    page.get_by_role("button", name="Assign to me").click()
    expect(amir.page.locator("#owner")).to_contain_text("Owner: anna")  # live
    expect(amir.page.locator("#note-new")).to_have_value("my draft")
    assert anna.errors == [] and amir.errors == []

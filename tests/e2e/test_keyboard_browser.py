"""Keyboard shortcuts (static/sagaboard/keys.js, docs/operator/keyboard.md) in real headless
Chromium (Debian's, driven by Playwright), against a live server holding the demo
(tests/support/demo_site.py: sagas in every state, a ROLLBACK_FAILED one, an approval waiting).

- ``/`` focuses the saga list's search, and keys typed there are text, not shortcuts; from
  another page it opens the list with the search focused;
- ``j`` / ``k`` move the current-row marker (focus and aria-current), ``o`` and Enter open
  the row's saga; the marker stays on its saga when a live update replaces or adds rows;
- ``?`` opens the dialog listing the page's shortcuts, Esc closes it and the focus returns;
- ``g`` then ``a`` goes to the approvals (``g s`` the list), and a ``g`` left alone lapses;
- on a saga page ``.`` lands on the ROLLBACK_FAILED step, ``o`` opens it, ``c`` copies the id;
- on the queue ``a`` and ``r`` open the decision dialog and decide nothing (no request
  leaves) until its own button is clicked; ``x`` ticks the current approval.

No page logs a console error. Every wait is bounded (``WAIT_MS``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.chromium import Tab, chromium
from tests.support.demo_site import PAGES, demo_site, log_in
from tests.support.live_server import Server, manage
from undo_core.remote import SagaboardClient

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
WAIT_MS = 10_000
GO_WAIT_MS = 1500  # how long a "g" waits for its letter (keys.js)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with demo_site("postgres" if PG else "sqlite", tmp_path_factory.mktemp("keys")) as server:
        yield server


@pytest.fixture(scope="module")
def token(site: Server) -> str:
    return manage(site.database_url, "sagaboard_token", "create", "demo", "--label", "keys e2e")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(WAIT_MS) as launched:
        yield launched


@pytest.fixture(scope="module")
def session(browser: Any, site: Server) -> Any:
    return log_in(browser, site.url)


class Person:
    """The demo login in a browser context of its own; its tabs record console errors."""

    def __init__(self, browser: Any, site: Server, session: Any) -> None:
        self.site = site
        self.context = browser.new_context(
            viewport={"width": 1280, "height": 900}, storage_state=session
        )
        self.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site.url)
        self.tabs: list[Tab] = []

    def tab(self, path: str) -> Tab:
        tab = Tab(self.context.new_page())
        tab.page.set_default_timeout(WAIT_MS)
        tab.page.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
        tab.page.on("pageerror", lambda e: tab.errors.append(str(e)))
        tab.page.on("dialog", lambda d: (tab.dialogs.append(d.message), d.dismiss()))
        self.tabs.append(tab)
        tab.page.goto(self.site.url + path)
        tab.page.locator("h1").click()  # the keys go to this page, nothing focused
        return tab

    def problems(self) -> list[str]:
        return [e for tab in self.tabs for e in tab.errors + tab.dialogs]


@pytest.fixture
def demo(browser: Any, site: Server, session: Any) -> Iterator[Person]:
    person = Person(browser, site, session)
    try:
        yield person
        assert person.problems() == []
    finally:
        person.context.close()


def rows(tab: Tab) -> Any:
    return tab.page.locator("#saga-rows > tr:has(a[aria-keyshortcuts=o])")


def row_of(tab: Tab, saga_id: str) -> Any:
    return rows(tab).filter(has=tab.page.locator("code", has_text=re.compile(f"^{saga_id}$")))


def marked(tab: Tab) -> Any:
    return tab.page.locator("[aria-current=true].key-current")


def posts_of(tab: Tab) -> list[str]:
    sent: list[str] = []
    tab.page.on("request", lambda r: sent.append(r.url) if r.method == "POST" else None)
    return sent


# ---------------------------------------------------------------- the list


def test_slash_focuses_the_search_and_keys_typed_there_are_text(demo: Person) -> None:
    from playwright.sync_api import expect

    listing = demo.tab(PAGES["saga-list"])
    search = listing.page.locator("#search-q")
    listing.page.keyboard.press("/")
    expect(search).to_be_focused()
    listing.page.keyboard.type("jjk/o")
    expect(search).to_have_value("jjk/o")  # typed, not obeyed
    expect(marked(listing)).to_have_count(0)
    assert listing.page.url == demo.site.url + "/"
    listing.page.keyboard.press("Escape")  # leaves the box, the text stays
    expect(search).not_to_be_focused()
    expect(search).to_have_value("jjk/o")
    listing.page.keyboard.press("j")
    expect(marked(listing)).to_have_count(1)

    # From a page without a search: the list opens, its search focused.
    overview = demo.tab(PAGES["overview"])
    overview.page.keyboard.press("/")
    overview.page.wait_for_url(demo.site.url + "/#search-q")
    expect(overview.page.locator("#search-q")).to_be_focused()
    overview.page.keyboard.type("demo-refund")
    expect(overview.page.locator("#search-q")).to_have_value("demo-refund")


def test_j_and_k_move_the_marker_and_o_or_enter_open_its_saga(demo: Person) -> None:
    from playwright.sync_api import expect

    listing = demo.tab(PAGES["saga-list"])
    all_rows = rows(listing)
    assert all_rows.count() >= 3
    keyboard = listing.page.keyboard
    keyboard.press("j")
    expect(all_rows.nth(0)).to_have_attribute("aria-current", "true")
    keyboard.press("j")
    expect(all_rows.nth(1)).to_have_attribute("aria-current", "true")
    expect(all_rows.nth(1)).to_be_focused()
    expect(marked(listing)).to_have_count(1)
    keyboard.press("j")
    keyboard.press("k")
    second = all_rows.nth(1)
    expect(second).to_have_attribute("aria-current", "true")
    expect(second).to_have_class(re.compile(r"\bkey-current\b"))
    expect(marked(listing)).to_have_count(1)
    href = second.locator("a[aria-keyshortcuts=o]").get_attribute("href")
    keyboard.press("o")
    listing.page.wait_for_url(demo.site.url + href)
    expect(listing.page.locator("ol.timeline")).to_be_visible()

    # k at the top stays there; Enter on the row opens it too.
    listing.page.go_back()
    listing.page.locator("h1").click()
    keyboard.press("k")
    first = all_rows.nth(0)
    expect(first).to_be_focused()
    href = first.locator("a[aria-keyshortcuts=o]").get_attribute("href")
    keyboard.press("Enter")
    listing.page.wait_for_url(demo.site.url + href)


def test_the_marker_stays_on_its_saga_through_live_updates(demo: Person, token: str) -> None:
    from playwright.sync_api import expect

    with SagaboardClient(demo.site.url, token) as api:
        api.begin("keys-live", saga_id="keys-live-1")
        listing = demo.tab(PAGES["saga-list"])
        listing.mark()
        mine = row_of(listing, "keys-live-1")
        expect(mine).to_have_count(1)
        position = rows(listing).evaluate_all(
            "(rs) => rs.findIndex(r => r.textContent.includes('keys-live-1'))"
        )
        for _ in range(position + 2):
            listing.page.keyboard.press("j")
        listing.page.keyboard.press("k")
        expect(mine).to_have_attribute("aria-current", "true")
        before = mine.element_handle()

        # Its row is replaced (a changed saga's row moves to the top, a new element).
        api.add_step("keys-live-1", "reserve_stock", {"sku": "A-1"})
        expect(mine.locator("td").nth(5)).to_have_text("1")
        assert not before.evaluate("r => r.isConnected"), "the row was not replaced"
        expect(mine).to_have_attribute("aria-current", "true")
        expect(mine).to_be_focused()
        expect(marked(listing)).to_have_count(1)

        # A new saga's row arrives above it: the marker does not move to another saga.
        api.begin("keys-live", saga_id="keys-live-2")
        expect(row_of(listing, "keys-live-2")).to_have_count(1)
        expect(mine).to_have_attribute("aria-current", "true")
        expect(marked(listing)).to_have_count(1)
        listing.page.keyboard.press("k")  # and j / k go on from where it is
        expect(row_of(listing, "keys-live-2")).to_have_attribute("aria-current", "true")
        listing.assert_not_reloaded()

        # On the saga page, the whole body is swapped in again: the step stays current.
        page = demo.tab("/sagas/demo/keys-live-1/")
        page.mark()
        step = page.page.locator("ol.timeline > li.step").first
        page.page.keyboard.press("j")
        expect(step).to_have_attribute("aria-current", "true")
        before = step.element_handle()
        api.complete_step("keys-live-1", "step-1", {"reserved": True})
        expect(step.locator("h3 .status")).to_have_text("COMPLETED")
        assert not before.evaluate("s => s.isConnected"), "the step was not swapped in again"
        expect(step).to_have_attribute("aria-current", "true")
        expect(step).to_be_focused()
        page.assert_not_reloaded()


# ---------------------------------------------------------------- every page


def test_question_mark_lists_the_page_shortcuts_and_esc_closes_and_gives_the_focus_back(
    demo: Person,
) -> None:
    from playwright.sync_api import expect

    listing = demo.tab(PAGES["saga-list"])
    hint = listing.page.get_by_role("contentinfo").get_by_role("button")
    expect(hint).to_have_text("Press ? for keyboard shortcuts")
    expect(hint).to_have_attribute("aria-keyshortcuts", "?")
    listing.page.keyboard.press("j")
    current = rows(listing).nth(0)
    expect(current).to_be_focused()
    listing.page.keyboard.press("?")
    dialog = listing.page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(dialog).to_be_visible()
    listed = ("Next / previous saga", "Open its saga", "Focus the search box",
              "Go to Approvals", "Go to Sagas", "Go to Overview", "These shortcuts")  # fmt: skip
    for text in listed:
        expect(dialog).to_contain_text(text)
    expect(dialog).not_to_contain_text("Next failed step")  # a saga page's key, not the list's
    assert listing.page.evaluate("document.activeElement.closest('dialog') !== null")
    listing.page.keyboard.press("j")  # the dialog holds the keys
    expect(current).to_have_attribute("aria-current", "true")
    listing.page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(current).to_be_focused()

    # The footer's button opens it as well; its Close button shuts it.
    hint.click()
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_be_hidden()
    expect(hint).to_be_focused()

    # Each page lists its own keys.
    saga = demo.tab(PAGES["saga-rollback-failed"])
    saga.page.keyboard.press("?")
    dialog = saga.page.get_by_role("dialog", name="Keyboard shortcuts")
    for text in ("Next / previous step", "Next failed step", "Copy the saga's id",
                 "Search the sagas"):  # fmt: skip
        expect(dialog).to_contain_text(text)
    queue = demo.tab(PAGES["approval-queue"])
    queue.page.keyboard.press("?")
    dialog = queue.page.get_by_role("dialog", name="Keyboard shortcuts")
    for text in ("Next / previous approval", "Approve: opens a dialog", "Reject", "Select it"):
        expect(dialog).to_contain_text(text)


def test_g_then_a_letter_goes_to_that_page_and_a_lone_g_lapses(demo: Person) -> None:
    from playwright.sync_api import expect

    tab = demo.tab(PAGES["saga-list"])
    keyboard = tab.page.keyboard
    keyboard.press("g")
    keyboard.press("a")
    tab.page.wait_for_url(demo.site.url + "/approvals/")
    expect(tab.page.get_by_role("heading", level=1)).to_contain_text("Approvals")
    tab.page.locator("h1").click()
    keyboard.press("g")
    keyboard.press("o")
    tab.page.wait_for_url(demo.site.url + "/overview/")
    tab.page.locator("h1").click()
    keyboard.press("g")
    keyboard.press("s")
    tab.page.wait_for_url(demo.site.url + "/")

    # "g" then a key that goes nowhere: swallowed, nothing happens.
    tab.page.locator("h1").click()
    keyboard.press("g")
    keyboard.press("j")
    expect(marked(tab)).to_have_count(0)
    # A "g" left alone lapses: the next key is itself again.
    keyboard.press("g")
    tab.page.wait_for_timeout(GO_WAIT_MS + 300)
    expect(tab.page.locator("#key-pending")).to_have_text("")
    keyboard.press("j")
    expect(marked(tab)).to_have_count(1)
    assert tab.page.url == demo.site.url + "/"
    # Typed in a field, g a are letters.
    tab.page.locator("#search-q").click()
    keyboard.type("ga")
    expect(tab.page.locator("#search-q")).to_have_value("ga")
    assert tab.page.url == demo.site.url + "/"


# ---------------------------------------------------------------- a saga page


def test_on_a_saga_page_dot_lands_on_the_failed_step_o_opens_it_and_c_copies_the_id(
    demo: Person,
) -> None:
    from playwright.sync_api import expect

    tab = demo.tab(PAGES["saga-rollback-failed"])
    steps = tab.page.locator("ol.timeline > li.step")
    failed = steps.filter(has=tab.page.locator("h3 .status", has_text="ROLLBACK_FAILED"))
    expect(failed).to_have_count(1)
    keyboard = tab.page.keyboard
    keyboard.press(".")
    expect(failed).to_be_focused()
    expect(failed).to_have_attribute("aria-current", "true")
    expect(marked(tab)).to_have_count(1)
    # Then the next failure (the forward step whose failure began the rollback), and round.
    failures = steps.locator(":scope[data-key-failed]")
    expect(failures).to_have_count(2)
    expect(failures.nth(1).locator("h3 .status")).to_have_text("FAILED")
    keyboard.press(".")
    expect(failures.nth(1)).to_be_focused()
    keyboard.press(".")
    expect(failed).to_be_focused()

    # o opens its details and makes the address its permalink; o again folds them.
    anchor = failed.get_attribute("id")
    details = failed.locator("details")
    assert details.count() >= 1
    keyboard.press("o")
    for n in range(details.count()):
        expect(details.nth(n)).to_have_attribute("open", "")
    assert tab.page.url.endswith(f"#{anchor}")
    keyboard.press("o")
    expect(failed.locator("details[open]")).to_have_count(0)

    # j / k walk the steps.
    index = steps.evaluate_all("(s) => s.findIndex(e => e.getAttribute('aria-current'))")
    keyboard.press("k" if index else "j")
    expect(steps.nth(index - 1 if index else 1)).to_be_focused()

    # c: the "Copy id" button's own copy (copylink.js).
    keyboard.press("c")
    copy_id = tab.page.get_by_role("button", name="Copy id (demo-refund-stuck)")
    expect(copy_id).to_have_attribute("aria-keyshortcuts", "c")
    expect(copy_id).to_have_text("Copied")
    assert tab.page.evaluate("navigator.clipboard.readText()") == "demo-refund-stuck"


def test_on_a_saga_page_without_failures_dot_says_so(demo: Person) -> None:
    from playwright.sync_api import expect

    tab = demo.tab("/sagas/demo/demo-checkout-ok/")  # completed: no step failed
    expect(tab.page.locator("ol.timeline > li.step[data-key-failed]")).to_have_count(0)
    tab.page.keyboard.press(".")
    expect(tab.page.locator("#flash")).to_have_text("No failed step on this page.")
    expect(marked(tab)).to_have_count(0)


# ---------------------------------------------------------------- the approval queue


def test_the_queue_keys_open_the_decision_dialog_and_never_decide_by_themselves(
    demo: Person,
) -> None:
    from playwright.sync_api import expect

    queue = demo.tab(PAGES["approval-queue"])
    queue.mark()
    sent = posts_of(queue)
    items = queue.page.locator("#approval-items li.approval")
    expect(items.first).to_be_visible()
    waiting = items.count()  # the demo's: demo-refund-awaiting first, the oldest
    item = items.first  # the one demo may decide (no token of demo's posted it)
    keyboard = queue.page.keyboard
    keyboard.press("j")
    expect(item).to_be_focused()
    keyboard.press("x")  # ticks it for the bulk form
    expect(item.locator("input[type=checkbox]")).to_be_checked()
    keyboard.press("x")
    expect(item.locator("input[type=checkbox]")).not_to_be_checked()

    # a: the dialog, naming the undo and what it runs, the reason asked; nothing sent.
    item.locator("input[name=reason]").fill("checked with the customer")
    item.locator("input[name=reason]").press("Escape")
    expect(item).to_be_focused()
    keyboard.press("a")
    dialog = queue.page.get_by_role("dialog", name="Approve this undo?")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(item.locator("header strong").inner_text())
    reason = dialog.get_by_label("Reason (required)")
    expect(reason).to_be_focused()
    expect(reason).to_have_value("checked with the customer")
    expect(dialog.get_by_role("button", name="Approve undo")).to_be_visible()
    keyboard.press("a")  # typed: text
    keyboard.press("Enter")  # never decides
    expect(dialog).to_contain_text("Enter does not decide: click \u201cApprove undo\u201d.")
    expect(dialog).to_be_visible()
    keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(item).to_be_focused()
    expect(item.locator("input[name=reason]")).to_have_value("checked with the customer" + "a")

    # r: the same dialog for a rejection; Cancel decides nothing either.
    keyboard.press("r")
    dialog = queue.page.get_by_role("dialog", name="Reject this undo?")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    queue.page.wait_for_timeout(500)  # a decision would have been sent by now
    assert sent == []
    expect(items).to_have_count(waiting)

    # The dialog's own button decides: the rejection is sent once, the item leaves.
    keyboard.press("r")
    dialog = queue.page.get_by_role("dialog", name="Reject this undo?")
    dialog.get_by_label("Reason (required)").fill("the refund stands")
    dialog.get_by_role("button", name="Reject").click()
    expect(items).to_have_count(waiting - 1)
    expect(queue.page.locator("#flash")).to_contain_text("rejected")
    assert len(sent) == 1
    queue.assert_not_reloaded()

"""In real headless Chromium (Debian's, driven by Playwright), against a real uvicorn server
on a throw-away database: a user logs in and watches sagas that an agent in another
process sends through the SDK arrive and change live, on the list and on a saga's page,
without a reload and without losing the list's filter or scroll position; hostile text in
a saga renders as text on both the live and the rendered path; no page logs a console
error. Screenshots are saved under test-artifacts/.

The agent (tests/e2e/agent.py) stops at each checkpoint until the test lets it on, so
every intermediate state is looked at, and every wait is bounded.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.chromium import Tab, chromium
from tests.support.live_server import ROOT, Server, manage, temp_database

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
AGENT = Path(__file__).with_name("agent.py")
WAIT_MS = 10_000  # for anything the browser should show: a live update takes milliseconds

_spec = importlib.util.spec_from_file_location("e2e_agent", AGENT)
assert _spec is not None and _spec.loader is not None
_agent = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_agent)
SCRIPT: str = _agent.SCRIPT
IMG: str = _agent.IMG

MAKE_SAGA = (
    "from sagaboard.models import Project; "
    "from sagaboard.engine.services.django_store import DjangoStore; "
    "from undo_core import Saga, define_tool; "
    "s = Saga('<script>alert(1)</script>', saga_id='from-elsewhere', "
    "store=DjangoStore(Project.objects.get(slug='demo'))); "
    "s.execute(define_tool('reserve_stock', lambda i: 1, lambda o, i: None), {}); s.complete()"
)
# Older sagas, so the filtered list is longer than the window and can be scrolled.
MAKE_OLDER_SAGAS = (
    "from sagaboard.models import Project; "
    "from sagaboard.engine.services.django_store import DjangoStore; "
    "from undo_core import Saga, define_tool; "
    "store = DjangoStore(Project.objects.get(slug='demo')); "
    "tool = define_tool('return_item', lambda i: {'item': i['itemId']}, lambda o, i: None)\n"
    "for n in range(30):\n"
    "    s = Saga('storebot-return', saga_id=f'older-{n:02}', store=store)\n"
    "    s.execute(tool, {'itemId': str(n)}); s.complete()"
)


@dataclass
class Site:
    server: Server
    database_url: str
    token: str

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with temp_database("postgres" if PG else "sqlite", tmp_path_factory.mktemp("e2e")) as url:
        manage(url, "migrate", "--no-input", "-v0")
        manage(url, "sagaboard_demo")
        manage(url, "shell", "-c", MAKE_OLDER_SAGAS)
        token = manage(url, "sagaboard_token", "create", "demo", "--label", "e2e")
        with Server(url, debug=True) as server:
            yield Site(server, url, token)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(WAIT_MS) as launched:
        yield launched


class User:
    """A logged-in browser session (one context): ``tab()`` opens a page in it."""

    def __init__(self, context: Any, site: Site) -> None:
        self.context, self.site = context, site
        self.tabs: list[Tab] = []

    def tab(self, path: str = "/") -> Tab:
        tab = Tab(self.context.new_page())
        tab.page.set_default_timeout(WAIT_MS)
        tab.page.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
        tab.page.on("pageerror", lambda e: tab.errors.append(str(e)))
        self.tabs.append(tab)
        tab.page.goto(self.site.url + path)
        return tab

    def console_errors(self) -> list[str]:
        return [error for tab in self.tabs for error in tab.errors]


@pytest.fixture(scope="module")
def logged_in(browser: Any, site: Site) -> dict[str, Any]:
    """The session cookie of demo/demo, logged in once through the login form."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"{site.url}/login/")
        page.fill("input[name=username]", "demo")
        page.fill("input[name=password]", "demo")
        page.click("button[type=submit]")
        page.wait_for_selector("#saga-rows")
        state: dict[str, Any] = context.storage_state()
        return state
    finally:
        context.close()


@pytest.fixture
def user(browser: Any, site: Site, logged_in: dict[str, Any]) -> Iterator[User]:
    context = browser.new_context(viewport={"width": 1280, "height": 720}, storage_state=logged_in)
    try:
        yield User(context, site)
    finally:
        context.close()


class Agent:
    """The agent's process: ``reach`` waits until it stops at a checkpoint, ``go`` lets it on."""

    def __init__(self, site: Site, saga_id: str, scenario: str) -> None:
        env = {**os.environ, "SAGABOARD_TOKEN": site.token, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, str(AGENT), site.url, saga_id, scenario],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put("")  # end of output

    def reach(self, checkpoint: str, timeout: float = 30) -> None:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"the agent did not reach {checkpoint!r} in {timeout:g} s"
            ) from None
        assert line == f"at {checkpoint}", f"expected {checkpoint!r}, the agent said {line!r}"

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 30) -> None:
        self.go()
        assert self.lines.get(timeout=timeout) == "done"
        assert self.proc.wait(timeout=timeout) == 0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@contextmanager
def agent(site: Site, saga_id: str, scenario: str) -> Iterator[Agent]:
    bot = Agent(site, saga_id, scenario)
    try:
        yield bot
    finally:
        bot.kill()


def row(tab: Tab, saga_id: str) -> Any:
    """The list row of ``saga_id`` (its id is shown in a <code> under the name)."""
    return tab.page.locator(f"#saga-rows tr:has(code:text-is('{saga_id}'))")


def row_status(tab: Tab, saga_id: str) -> Any:
    return row(tab, saga_id).locator("td > .status")


def saga_status(tab: Tab) -> Any:
    return tab.page.locator("h1 > .status")


def step_states(tab: Tab) -> Any:
    return tab.page.locator("ol.timeline > li h3 > .status")


def assert_inert(tab: Tab) -> None:
    """Nothing of the payloads ran or became an element: they are text only."""
    assert tab.page.evaluate("typeof window.__xss") == "undefined", "a payload ran"
    assert tab.page.locator("img[src='x']").count() == 0
    assert tab.page.locator("img").count() == 0
    scripts = tab.page.eval_on_selector_all("script", "s => s.map(e => e.textContent)")
    assert not any("__xss" in text for text in scripts)


def test_the_list_shows_an_sdk_saga_arrive_and_change_live_keeping_filter_and_scroll(
    site: Site, user: User
) -> None:
    from playwright.sync_api import expect

    saga_id = "live-list-1"
    tab = user.tab("/?q=storebot")
    page = tab.page
    rows = page.locator("#saga-rows tr").count()  # the demo's storebot sagas, 30 older ones
    assert rows > 30
    # Scrolled into the rows (past the filter bar), 200 px below the table's top.
    y = page.evaluate(
        "Math.round(document.querySelector('#saga-rows').getBoundingClientRect().top"
        " + window.scrollY + 200)"
    )
    page.evaluate(f"window.scrollTo(0, {y})")
    page.wait_for_function(f"window.scrollY === {y}")
    # The row at the top of the window: it should stay where the user sees it.
    anchor = page.evaluate(
        "(() => { const tr = [...document.querySelectorAll('#saga-rows tr')]"
        ".find(r => r.getBoundingClientRect().top > 150);"
        " return [tr.id, tr.getBoundingClientRect().top]; })()"
    )
    tab.mark()

    with agent(site, saga_id, "storebot") as bot:
        bot.reach("return_item")
        expect(row_status(tab, saga_id)).to_have_text("IN_PROGRESS")
        bot.go()
        bot.reach("refund_payment")
        bot.go()
        bot.reach("undoing")  # generate_label failed, the undo of refund_payment runs
        expect(row_status(tab, saga_id)).to_have_text("COMPENSATING")
        bot.go()
        bot.reach("rolled_back")
        expect(row_status(tab, saga_id)).to_have_text("ROLLED_BACK")
        bot.finish()

    tab.assert_not_reloaded()
    expect(row(tab, saga_id)).to_have_count(1)  # updated in place, not repeated
    assert (
        page.locator("#saga-rows tr").first.locator("td").first.locator("code").inner_text()
        == saga_id
    )
    expect(page.locator("#saga-rows tr")).to_have_count(rows + 1)
    # The filter is kept: in the URL, in the search box, and on the live feed (the
    # decoy saga, sent before the saga above, never arrived).
    assert page.url.endswith("/?q=storebot")
    expect(page.locator("input[name=q]")).to_have_value("storebot")
    expect(row(tab, f"{saga_id}-decoy")).to_have_count(0)
    # The scroll position is kept: the rows the user looked at did not move.
    assert page.evaluate("window.scrollY") >= y
    anchor_id, anchor_top = anchor
    top = page.evaluate(f"document.getElementById('{anchor_id}').getBoundingClientRect().top")
    assert abs(top - anchor_top) <= 1, f"the row the user saw moved from {anchor_top} to {top}"
    tab.screenshot("saga-list.png")
    assert user.console_errors() == []


def test_a_list_filtered_by_status_does_not_keep_showing_a_status_the_saga_left(
    site: Site, user: User
) -> None:
    from playwright.sync_api import expect

    saga_id = "live-status-1"
    tab = user.tab("/?status=IN_PROGRESS")
    with agent(site, saga_id, "storebot") as bot:
        bot.reach("return_item")
        expect(row_status(tab, saga_id)).to_have_text("IN_PROGRESS")
        for checkpoint in ("refund_payment", "undoing", "rolled_back"):
            bot.go()
            bot.reach(checkpoint)
        bot.finish()
    assert user.console_errors() == []
    # Whether the row leaves the list or shows ROLLED_BACK, IN_PROGRESS is wrong now.
    # Every event is on the server already: a live update takes milliseconds.
    stale = row_status(tab, saga_id).filter(has_text="IN_PROGRESS")
    expect(stale).to_have_count(0, timeout=3_000)


def test_a_saga_page_follows_its_steps_and_rollback_live(site: Site, user: User) -> None:
    from playwright.sync_api import expect

    saga_id = "live-detail-1"
    tab = user.tab("/")
    page = tab.page
    with agent(site, saga_id, "storebot") as bot:
        bot.reach("return_item")
        row(tab, saga_id).locator("a").click()  # the link of a row that arrived live
        page.wait_for_url(f"**/sagas/demo/{saga_id}/")
        expect(saga_status(tab)).to_have_text("IN_PROGRESS")
        expect(step_states(tab)).to_have_text(["COMPLETED"])
        tab.mark()

        bot.go()
        bot.reach("refund_payment")
        expect(step_states(tab)).to_have_text(["COMPLETED", "COMPLETED"])
        expect(page.locator("ol.timeline > li h3")).to_contain_text(
            ["step-1 · return_item", "step-2 · refund_payment"]
        )
        bot.go()
        bot.reach("undoing")
        expect(saga_status(tab)).to_have_text("COMPENSATING")
        expect(step_states(tab)).to_have_text(["COMPLETED", "COMPENSATING", "FAILED"])
        expect(page.locator("li.step p.error")).to_have_text(
            "ConnectionError: FedEx API returned 500"
        )
        bot.go()
        bot.reach("rolled_back")
        expect(saga_status(tab)).to_have_text("ROLLED_BACK")
        expect(step_states(tab)).to_have_text(["ROLLED_BACK", "ROLLED_BACK", "FAILED"])
        bot.finish()

    tab.assert_not_reloaded()
    # The event log grew live as well, ending with the saga's own move to ROLLED_BACK.
    last = page.locator("table.events tbody tr").last
    expect(last).to_contain_text("COMPENSATING → ROLLED_BACK")
    tab.screenshot("saga-detail.png")
    assert user.console_errors() == []


def test_hostile_text_in_a_saga_stays_text_live_and_rendered(site: Site, user: User) -> None:
    from playwright.sync_api import expect

    saga_id = "xss-probe-1"
    name = f"xss {SCRIPT}{IMG}"
    listing = user.tab("/")
    listing.mark()
    with agent(site, saga_id, "xss") as bot:
        bot.reach("echo")
        expect(row(listing, saga_id).locator("a")).to_have_text(name)  # live, as text
        detail = user.tab(f"/sagas/demo/{saga_id}/")
        expect(step_states(detail)).to_have_text(["COMPLETED"])
        detail.mark()
        bot.go()
        bot.reach("rolled_back")
        expect(saga_status(detail)).to_have_text("ROLLED_BACK")  # the error arrived live
        expect(row_status(listing, saga_id)).to_have_text("ROLLED_BACK")
        bot.finish()

    listing.assert_not_reloaded()
    detail.assert_not_reloaded()
    for how in ("live", "rendered"):
        if how == "rendered":
            listing.page.reload()
            detail.page.reload()
        expect(row(listing, saga_id).locator("a")).to_have_text(name)
        expect(row(listing, saga_id).locator("a")).to_be_visible()
        page = detail.page
        expect(page.locator("h1")).to_contain_text(name)
        first, second = page.locator("ol.timeline > li").all()
        opened = first.locator('.jt-leaf[data-path="output.img"]')
        for _ in range(5):  # a late live update redraws the cards, closed: open them again
            # Input, Output, their diff and Traceback (not tree nodes)
            page.eval_on_selector_all("li.step > details", "all => all.forEach(d => d.open = true)")
            if opened.is_visible():
                break
            page.wait_for_timeout(500)
        for key, payload in (("script", SCRIPT), ("img", IMG)):
            # JSON trees (docs/operator/saga-page.md): each string shown as text, quoted.
            for where, root in ((first, "input"), (first, "output"), (second, "input")):
                leaf = where.locator(f'.jt-leaf[data-path="{root}.{key}"] .jt-string')
                expect(leaf).to_have_text(f'"{payload}"')  # the string itself, in quotes
        expect(second.locator("p.error")).to_have_text(f"ConnectionError: {SCRIPT}{IMG}")
        expect(first.locator('.jt-leaf[data-path="output.img"]')).to_be_visible()
        expect(second.locator("p.error")).to_be_visible()
        for tab in (listing, detail):
            assert_inert(tab)
        listing.screenshot(f"xss-list-{how}.png")
        detail.screenshot(f"xss-detail-{how}.png")
    assert user.console_errors() == []


def test_a_saga_from_another_process_appears_live_and_renders_as_text(
    site: Site, user: User
) -> None:
    """A saga written straight to the database by another process (``DjangoStore``)."""
    from playwright.sync_api import expect

    tab = user.tab("/")
    tab.mark()
    env = {**os.environ, "DATABASE_URL": site.database_url}
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", MAKE_SAGA],
        cwd=ROOT, env=env, check=True, timeout=60, capture_output=True,
    )  # fmt: skip
    expect(row(tab, "from-elsewhere").locator("a")).to_have_text("<script>alert(1)</script>")
    expect(row_status(tab, "from-elsewhere")).to_have_text("COMPLETED")
    tab.assert_not_reloaded()

    row(tab, "demo-refund-stuck").locator("a").click()
    tab.page.wait_for_selector("text=Event log")
    expect(saga_status(tab)).to_have_text("ROLLBACK_FAILED")
    tab.screenshot("demo-refund-stuck.png")
    assert user.console_errors() == []

"""Times and payloads in real headless Chromium (Debian's, driven by Playwright) against a
real uvicorn server, with the browser in New York's time zone.

A viewer opens a saga: its times read "3 min ago", UTC by default, the exact time shown
when a time has the focus (and named by its aria-describedby); the header's toggle turns
them to New York's time, a reload keeps the choice (localStorage, and the cookie the
server reads: the page arrives with it); a time added to the page later is shown the same
way, and so are the times of a saga page's body that the live feed swaps in. The saga's
input is a JSON tree: a nested node unfolds, its copy buttons put its path and its value
on the clipboard; a longer saga's trees load when a step's payloads are opened.
Screenshots: test-artifacts/times-utc.png, times-local.png and payload-tree.png.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.chromium import Tab, chromium
from tests.support.live_server import Server, manage, temp_database

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
WAIT_MS = 15_000
PASSWORD = "pw-times-e2e-4711"

MAKE_SAGA = f"""
from datetime import UTC, datetime, timedelta
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.models import Project, Saga
from undo_core import Saga as EngineSaga, define_tool

project = Project.objects.create(slug="shop", name="Shop")
vic = get_user_model().objects.create_user("vic", password={PASSWORD!r})
vic.groups.add(Group.objects.get(name="viewer"))
project.members.add(vic)
saga = EngineSaga("storebot-return", saga_id="tz-1", store=DjangoStore(project))
value = {{"orderId": "o-17", "items": [{{"sku": "A-1"}}, {{"sku": "B-2"}}, {{"sku": "C-3"}}]}}
saga.execute(define_tool("return_item", lambda i: {{"refund": "r-9"}}, lambda o, i: None), value)
saga.complete()
ago = timezone.now() - timedelta(minutes=3, seconds=10)
long = EngineSaga("storebot-long", saga_id="long-1", store=DjangoStore(project))
tool = define_tool("return_item", lambda i: {{"ok": True}}, lambda o, i: None)
for n in range(3):
    long.execute(tool, {{"n": n}})
long.complete()
from sagaboard.record.services import manual_flow
manual_flow.saga_begin(project=project, event_id="h-1", name="by hand", saga_id="hand-1",
                       token_pk=None)
Saga.objects.filter(saga_id="tz-1").update(
    driver="client",  # its times are the agent's
    created_at=datetime(2026, 1, 31, 12, 0, 5, tzinfo=UTC), received_at=ago, changed_at=ago,
)
"""


@dataclass
class Site:
    url: str
    database_url: str


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with temp_database("postgres" if PG else "sqlite", tmp_path_factory.mktemp("e2e-tz")) as url:
        manage(url, "migrate", "--no-input", "-v0")
        manage(url, "shell", "-c", MAKE_SAGA)
        # long-1's three steps are past the inline limit: its trees load when opened.
        with Server(url, debug=False, env={"SAGABOARD_PAYLOAD_INLINE_STEPS": "2"}) as server:
            yield Site(server.url, url)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(WAIT_MS) as launched:
        yield launched


@pytest.fixture
def vic(browser: Any, site: Site) -> Iterator[Any]:
    context = browser.new_context(
        viewport={"width": 1280, "height": 900},
        timezone_id="America/New_York",
        permissions=["clipboard-read", "clipboard-write"],
    )
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(site.url + "/login/")
    page.fill("input[name=username]", "vic")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#saga-rows")
    yield page
    assert errors == [], errors
    context.close()


def began(page: Any) -> Any:
    return page.locator(".reported-times .when").first


def test_times_toggle_between_utc_and_local_and_the_choice_is_kept(site: Site, vic: Any) -> None:
    from playwright.sync_api import expect

    tab = Tab(vic)
    # The list: relative, from the server's clock.
    changed = vic.locator("#saga-rows tr").filter(has_text="tz-1").locator("time").first
    expect(changed).to_have_text("3 min ago")

    vic.goto(site.url + "/sagas/shop/tz-1/")
    expect(vic.locator("html")).to_have_attribute("data-tz", "utc")
    toggle = vic.get_by_role("group", name="Show times in")
    expect(toggle).to_be_visible()
    expect(toggle.get_by_role("button", name="UTC")).to_have_attribute("aria-pressed", "true")
    received = vic.locator(".when[data-clock=server]").filter(has_text="received")
    expect(received.locator("time")).to_have_text("3 min ago")
    expect(received).to_contain_text("(server clock)")

    # The exact time: on focus, and as the <time>'s description (not a title tooltip).
    moment = began(vic).locator("time")
    expect(moment).to_have_text(re.compile(r"^\d+ (mo|y) ago$"))
    detail = began(vic).locator(".when-detail")
    expect(detail).to_be_hidden()
    moment.focus()
    expect(detail).to_be_visible()
    expect(detail).to_have_text(
        re.compile(r"^began · agent clock: 2026-01-31 12:00:05\.000 UTC \(")
    )
    described = moment.get_attribute("aria-describedby")
    assert described and vic.locator(f"#{described}").count() == 1
    assert moment.get_attribute("title") is None
    tab.screenshot("times-utc.png")

    # Local: New York's time (EST in January), everywhere on the page at once.
    toggle.get_by_role("button", name="Local").click()
    expect(vic.locator("html")).to_have_attribute("data-tz", "local")
    expect(detail).to_have_text(re.compile(r"2026-01-31 07:00:05\.000 EST"))
    expect(toggle.get_by_role("button", name="Local")).to_have_attribute("aria-pressed", "true")
    moment.focus()
    tab.screenshot("times-local.png")

    # Kept: after a reload, and the server's own page starts with it (the cookie).
    vic.reload()
    expect(vic.locator("html")).to_have_attribute("data-tz", "local")
    expect(began(vic).locator(".when-detail")).to_have_text(re.compile(r"07:00:05\.000 EST"))
    assert vic.evaluate("localStorage.getItem('sagaboard.tz')") == "local"
    served = vic.request.get(site.url + "/sagas/shop/tz-1/").text()
    assert '<html lang="en" data-tz="local">' in served
    assert 'data-tz="local" aria-pressed="true"' in served

    # A time swapped in later (htmx, the live feed) is shown the same way.
    vic.evaluate(
        """() => { const span = document.createElement('span');
        span.className = 'when'; span.id = 'late';
        span.innerHTML = '<time datetime="2026-01-31T12:00:05.000Z" data-when="exact" ' +
          'data-what="happened" data-clock-text="agent clock" tabindex="0">' +
          '2026-01-31 12:00:05.000 UTC</time><span class="when-detail"></span>';
        document.querySelector('main').appendChild(span); }"""
    )
    expect(vic.locator("#late time")).to_have_text("2026-01-31 07:00:05.000 EST")

    toggle = vic.get_by_role("group", name="Show times in")
    toggle.get_by_role("button", name="UTC").click()
    expect(vic.locator("#late time")).to_have_text("2026-01-31 12:00:05.000 UTC")
    vic.reload()
    expect(vic.locator("html")).to_have_attribute("data-tz", "utc")


def test_the_input_tree_unfolds_and_copies_a_path_and_a_value(site: Site, vic: Any) -> None:
    from playwright.sync_api import expect

    vic.goto(site.url + "/sagas/shop/tz-1/")
    vic.locator("details.payload > summary", has_text="Input").first.click()
    tree = vic.locator(".json-tree").first
    node = tree.locator('details[data-path="input.items[2]"]')
    leaf = tree.locator('.jt-leaf[data-path="input.items[2].sku"]')
    expect(node).to_be_visible()
    expect(leaf).to_be_hidden()  # nested nodes start folded
    node.locator("> summary").click()
    expect(leaf).to_be_visible()
    expect(leaf).to_contain_text('sku: "C-3"')

    leaf.get_by_role("button", name="Copy the path input.items[2].sku").click()
    expect(leaf.locator("button.jt-copy").first).to_have_text("copied")
    assert vic.evaluate("navigator.clipboard.readText()") == "input.items[2].sku"
    leaf.get_by_role("button", name="Copy the value of input.items[2].sku").click()
    vic.wait_for_function("async () => (await navigator.clipboard.readText()) === 'C-3'")

    # A copy button inside a node's summary copies without folding the node.
    node.get_by_role("button", name="Copy the value of input.items[2]", exact=True).click()
    vic.wait_for_function(
        """async () => (await navigator.clipboard.readText()) === '{"sku":"C-3"}'"""
    )
    expect(leaf).to_be_visible()
    Tab(vic).screenshot("payload-tree.png")


def test_a_long_sagas_trees_load_when_opened(site: Site, vic: Any) -> None:
    from playwright.sync_api import expect

    vic.goto(site.url + "/sagas/shop/long-1/")
    expect(vic.locator(".json-tree")).to_have_count(0)
    vic.locator("details.payload-lazy > summary").nth(1).click()
    tree = vic.locator(".payload-loaded .json-tree").first
    vic.locator(".payload-loaded details.payload > summary", has_text="Input").first.click()
    leaf = tree.locator('.jt-leaf[data-path="input.n"]')
    expect(leaf).to_contain_text("n: 1")
    leaf.get_by_role("button", name="Copy the path input.n").click()
    vic.wait_for_function("async () => (await navigator.clipboard.readText()) === 'input.n'")
    expect(vic.locator(".json-tree")).to_have_count(2)  # that step's input and output only


ADD_STEP = """
from sagaboard.record.services import manual_flow
from sagaboard.models import Project
manual_flow.step_add(project=Project.objects.get(slug="shop"), event_id="h-2",
                     saga_id="hand-1", tool_name="charge", input={"cents": 1250},
                     undo={"kind": "none"})
"""


def test_times_and_trees_the_live_feed_swaps_in_are_shown_the_same(site: Site, vic: Any) -> None:
    from playwright.sync_api import expect

    vic.goto(site.url + "/sagas/shop/hand-1/")
    tab = Tab(vic)
    tab.mark()
    expect(vic.locator("ol.timeline > li")).to_have_count(0)
    manage(site.database_url, "shell", "-c", ADD_STEP)  # another process: the live feed tells
    expect(vic.locator("ol.timeline > li h3")).to_contain_text(["step-1 · charge"])
    tab.assert_not_reloaded()
    changed = vic.locator(".when").filter(has_text="last change").locator("time")
    expect(changed).to_have_text(re.compile(r"^(just now|\d+ s ago)$"))  # not the raw UTC text
    expect(changed).to_have_attribute("aria-describedby", re.compile(r"^when-\d+$"))
    vic.locator("details.payload > summary", has_text="Input").first.click()
    leaf = vic.locator('.jt-leaf[data-path="input.cents"]')
    expect(leaf).to_contain_text("cents: 1250")
    leaf.get_by_role("button", name="Copy the value of input.cents").click()
    vic.wait_for_function("async () => (await navigator.clipboard.readText()) === '1250'")

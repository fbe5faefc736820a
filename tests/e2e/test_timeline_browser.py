"""The saga timeline in real headless Chromium (Debian's, driven by Playwright) against a real
uvicorn server: a saga of 1,000 steps (the limit, written straight into the tables) renders
and answers quickly; clicking a bar brings its step card into view with the step's own
permalink in the address bar; a bar is a link with an accessible name; the copy-link control
copies the permalink; the now-line of a live saga moves; nothing logs a console error (a CSP
violation would). Screenshot: test-artifacts/timeline.png.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.chromium import ARTIFACTS, chromium
from tests.support.live_server import Server, manage, temp_database

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
WAIT_MS = 15_000
PASSWORD = "pw-timeline-e2e-2718"

MAKE_SAGAS = f"""
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone
from sagaboard.models import Project, Saga, Step
from tests.support.timeline_sagas import big_saga

project = Project.objects.create(slug="shop", name="Shop")
ann = get_user_model().objects.create_user("ann", password={PASSWORD!r})
ann.groups.add(Group.objects.get(name="viewer"))
project.members.add(ann)
big_saga(project, "big-1", 1000)
live = big_saga(project, "live-1", 6)
Saga.objects.filter(pk=live.pk).update(status="IN_PROGRESS", waiting_for=None)
Step.objects.filter(saga=live, step_id="step-6").update(
    state="PENDING", completed_at=None, created_at=timezone.now() - timedelta(seconds=2)
)
"""


@dataclass
class Site:
    url: str


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with temp_database("postgres" if PG else "sqlite", tmp_path_factory.mktemp("e2e-tl")) as url:
        manage(url, "migrate", "--no-input", "-v0")
        manage(url, "shell", "-c", MAKE_SAGAS)
        with Server(url, debug=False) as server:
            yield Site(server.url)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(WAIT_MS) as launched:
        yield launched


@pytest.fixture
def ann(browser: Any, site: Site) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site.url)
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


def test_a_thousand_step_saga_renders_fast_and_a_bar_opens_its_step(site: Site, ann: Any) -> None:
    from playwright.sync_api import expect

    began = time.monotonic()
    ann.goto(site.url + "/sagas/shop/big-1/", wait_until="domcontentloaded")
    bar = ann.locator('a.bar.run[href="#step-step-900"]')
    bar.click()  # interactive (within WAIT_MS: not frozen): the click lands and navigates
    took = time.monotonic() - began
    timing = ann.evaluate(
        "() => { const n = performance.getEntriesByType('navigation')[0];"
        " return [n.responseEnd - n.requestStart, n.domInteractive, n.loadEventEnd]; }"
    )
    print(f"\n1,000 steps: response {timing[0]:.0f} ms, DOM interactive {timing[1]:.0f} ms, "
          f"load {timing[2]:.0f} ms, to a clicked bar {took * 1000:.0f} ms")  # fmt: skip
    expect(ann.locator("svg.timeline-chart a.bar.run")).to_have_count(1000)
    assert ann.evaluate("location.hash") == "#step-step-900"
    expect(ann.locator("#step-step-900")).to_be_in_viewport()
    expect(ann.locator("#step-step-900 h3")).to_contain_text("step-900")

    # A bar is a link with an accessible name that says the step, its duration and state.
    link = ann.get_by_role("link", name="step-100 import_row_0: 2.0 s, COMPLETED")
    expect(link).to_have_count(1)
    link.focus()
    assert ann.evaluate("document.activeElement.getAttribute('href')") == "#step-step-100"
    ann.keyboard.press("Enter")
    expect(ann.locator("#step-step-100")).to_be_in_viewport()
    assert ann.evaluate("location.hash") == "#step-step-100"

    # The permalink, opened in a fresh page load, lands on the card too.
    ann.goto(site.url + "/sagas/shop/big-1/#step-step-750")
    expect(ann.locator("#step-step-750")).to_be_in_viewport()

    ann.evaluate("window.scrollTo(0, 0); document.querySelector('.timeline-scroll').scrollTop = 0")
    ARTIFACTS.mkdir(exist_ok=True)
    ann.screenshot(path=str(ARTIFACTS / "timeline.png"))


def test_the_copy_link_control_copies_the_permalink(site: Site, ann: Any) -> None:
    from playwright.sync_api import expect

    ann.goto(site.url + "/sagas/shop/big-1/")
    button = ann.locator("#step-step-500").get_by_role("button", name="Copy link to step step-500")
    button.click()
    expect(button).to_have_text("Copied")
    assert ann.evaluate("navigator.clipboard.readText()") == (
        f"{site.url}/sagas/shop/big-1/#step-step-500"
    )
    ann.get_by_role("button", name="Copy id (big-1)").click()
    assert ann.evaluate("navigator.clipboard.readText()") == "big-1"
    expect(button).to_have_text("Copy link")  # back to its label


def test_without_the_clipboard_api_the_link_is_shown_selected_to_copy(site: Site, ann: Any) -> None:
    from playwright.sync_api import expect

    ann.goto(site.url + "/sagas/shop/big-1/")
    ann.evaluate("Object.defineProperty(navigator, 'clipboard', {value: undefined})")
    ann.get_by_role("button", name="Copy link to this saga").click()
    field = ann.locator("input.copy-fallback")
    expect(field).to_have_value(f"{site.url}/sagas/shop/big-1/")
    expect(field).to_be_focused()
    assert ann.evaluate("document.activeElement.selectionEnd") == len(
        f"{site.url}/sagas/shop/big-1/"
    )


def test_the_now_line_moves_while_the_saga_is_live(site: Site, ann: Any) -> None:
    ann.goto(site.url + "/sagas/shop/live-1/")
    line = ann.locator("svg.timeline-chart line.now-line")
    running = ann.locator('a.bar.run[href="#step-step-6"] rect')
    x0, w0 = float(line.get_attribute("x1")), float(running.get_attribute("width"))
    ann.wait_for_timeout(2500)
    x1, w1 = float(line.get_attribute("x1")), float(running.get_attribute("width"))
    assert x1 > x0 and w1 > w0
    assert abs((float(running.get_attribute("x")) + w1) - x1) < 0.5  # the open bar ends at now
    ARTIFACTS.mkdir(exist_ok=True)
    ann.screenshot(path=str(ARTIFACTS / "timeline-live.png"))

"""Finding sagas in real headless Chromium (Debian's, driven by Playwright) against a real
uvicorn server: the search box finds by JSON path and by error text, a column header sorts
(aria-sort follows), a running saga's duration ticks (static JS under the CSP), a bad value
says which field, and a saved view is listed and opens its filter. No console errors.
Screenshot: test-artifacts/search-list.png.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.chromium import Tab, chromium
from tests.support.live_server import ROOT, Server, manage, temp_database

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
WAIT_MS = 15_000
PASSWORD = "pw-search-e2e-2718"

MAKE_SAGAS = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sagaboard.models import Project
from tests.support.search_world import build

project = Project.objects.create(slug="shop", name="Shop")
vic = get_user_model().objects.create_user("vic", password={PASSWORD!r})
vic.groups.add(Group.objects.get(name="viewer"))
project.members.add(vic)
build(project)
from datetime import timedelta
from django.utils import timezone
from sagaboard.models import Saga
Saga.objects.filter(saga_id="s-refund").update(received_at=timezone.now() - timedelta(seconds=30))
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    kind = "postgres" if PG else "sqlite"
    with temp_database(kind, tmp_path_factory.mktemp("e2e-search")) as url:
        manage(url, "migrate", "--no-input", "-v0")
        env = {**os.environ, "DATABASE_URL": url}
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", MAKE_SAGAS],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, f"manage.py shell failed:\n{done.stdout}\n{done.stderr}"
        with Server(url, debug=False) as server:
            yield server.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(WAIT_MS) as launched:
        yield launched


@pytest.fixture
def vic(browser: Any, site: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(site + "/login/")
    page.fill("input[name=username]", "vic")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#saga-rows")
    yield page
    # A 400 page logs its status as a console error: that one is expected.
    assert [e for e in errors if "400" not in e] == [], errors
    context.close()


def test_search_sort_duration_and_saved_views(site: str, vic: Any) -> None:
    from playwright.sync_api import expect

    rows = vic.locator("#saga-rows tr")
    expect(rows).to_have_count(5)
    vic.fill("#search-q", 'input.orderId = "o-17"')
    vic.press("#search-q", "Enter")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("s-refund")
    # A running saga's duration ticks, written by static/sagaboard/durations.js.
    duration = rows.first.locator("time.duration")
    first = duration.text_content()
    vic.wait_for_timeout(1500)
    assert duration.text_content() != first

    vic.fill("#search-q", "error:acme")
    vic.press("#search-q", "Enter")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("charge_card")  # the failing step's tool
    Tab(vic).screenshot("search-list.png")

    vic.goto(site + "/")
    started = vic.locator("th", has_text="Started")
    started.locator("a").click()
    expect(started).to_have_attribute("aria-sort", "descending")
    started.locator("a").click()
    expect(started).to_have_attribute("aria-sort", "ascending")
    expect(rows.first).to_contain_text("s-other")  # the first received

    vic.goto(site + "/?json=input.orderId%20%3D%20%7B%7D")
    expect(vic.locator("p.message.error")).to_contain_text("json: compare with a string")

    vic.goto(site + "/?status=ROLLED_BACK")
    vic.click("details.saved-views > summary")  # a closed panel of the filter bar
    vic.fill("input[name=name]", "rolled back")
    vic.click(".save-view button[type=submit]")
    link = vic.locator(".saved-views a", has_text="rolled back")
    expect(link).to_have_count(1)
    vic.goto(site + "/")
    vic.click("details.saved-views > summary")
    vic.locator(".saved-views a", has_text="rolled back").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("s-failed")

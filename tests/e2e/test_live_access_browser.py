"""In headless Chromium: an open page stops being live the moment its user may no longer watch.

Logging out in one tab takes every other tab of that session to the login page (the
feed closes with 4401 and the page reloads); a viewer taken out of the project by
another process (a command, whose in-memory channel layer reaches no web process) sees
the list reload without the project's sagas within the server's periodic re-check
(1 s here; 4403). That pushed revocations cross processes is tested with Redis in
tests/sagaboard/live/test_live_cluster.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.chromium import Tab, chromium
from tests.support.live_server import Server, manage, temp_database

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
WAIT_MS = 10_000

VIEWER = (
    "from django.contrib.auth.models import Group, User; from sagaboard.models import Project; "
    "u = User.objects.create_user('vera', password='vera-pw-123'); "
    "u.groups.add(Group.objects.get(name='viewer')); "
    "Project.objects.get(slug='demo').members.add(u)"
)
REMOVE_VERA = (
    "from django.contrib.auth.models import User; from sagaboard.models import Project; "
    "Project.objects.get(slug='demo').members.remove(User.objects.get(username='vera'))"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    with temp_database("postgres" if PG else "sqlite", tmp_path_factory.mktemp("e2e")) as url:
        manage(url, "migrate", "--no-input", "-v0")
        manage(url, "sagaboard_demo")
        manage(url, "shell", "-c", VIEWER)
        env = {"SAGABOARD_LIVE_RECHECK_SECONDS": "1", "REDIS_URL": ""}
        with Server(url, env=env) as server:
            yield server, url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(WAIT_MS) as launched:
        yield launched


def logged_in(browser: Any, server: Server, username: str, password: str) -> Any:
    """A browser context with a session of its own, logged in through the form."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{server.url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_selector("#saga-rows")
    page.close()
    return context


def open_tab(context: Any, server: Server, path: str) -> Tab:
    tab = Tab(context.new_page())
    tab.page.set_default_timeout(WAIT_MS)
    tab.page.goto(server.url + path)
    tab.page.wait_for_function("() => document.querySelector('[ws-connect]') !== null")
    tab.page.wait_for_timeout(300)  # the socket opens
    tab.mark()
    return tab


def test_logging_out_in_one_tab_takes_the_others_to_the_login_page(
    browser: Any, site: tuple[Server, str]
) -> None:
    server, _ = site
    context = logged_in(browser, server, "demo", "demo")
    try:
        listing = open_tab(context, server, "/")
        first = listing.page.locator("#saga-rows tr a").first.get_attribute("href")
        saga_page = open_tab(context, server, first)
        saga_page.page.wait_for_selector("[ws-connect*='saga=']")
        other = open_tab(context, server, "/approvals/")
        other.page.click("header form button[type=submit]")  # Log out
        for tab in (listing, saga_page):
            tab.page.wait_for_url("**/login/**")
            assert tab.page.locator("input[name=password]").is_visible()
    finally:
        context.close()


def test_a_viewer_taken_out_of_the_project_sees_the_list_without_it(
    browser: Any, site: tuple[Server, str]
) -> None:
    server, url = site
    context = logged_in(browser, server, "vera", "vera-pw-123")
    try:
        tab = open_tab(context, server, "/")
        assert tab.page.locator("#saga-rows tr[id^='saga-']").count() > 0
        manage(url, "shell", "-c", REMOVE_VERA)
        tab.page.wait_for_function("() => window.__marker === undefined")
        assert tab.page.locator("#saga-rows tr[id^='saga-']").count() == 0
    finally:
        context.close()


def test_the_header_says_when_the_page_is_live_and_when_it_is_reconnecting(
    browser: Any, site: tuple[Server, str]
) -> None:
    server, _ = site
    context = logged_in(browser, server, "demo", "demo")
    try:
        tab = open_tab(context, server, "/")
        state = tab.page.locator("#live-state")
        tab.page.wait_for_function(
            "() => document.getElementById('live-state').dataset.state === 'live'"
        )
        assert state.is_visible() and state.inner_text() == "Live"
        server.stop()  # the feed's socket closes with the server
        tab.page.wait_for_function(
            "() => document.getElementById('live-state').dataset.state === 'reconnecting'"
        )
        assert state.inner_text() == "Reconnecting…"
        server.start()  # the ws extension reconnects by itself
        tab.page.wait_for_function(
            "() => document.getElementById('live-state').dataset.state === 'live'",
            timeout=30_000,
        )
        assert state.inner_text() == "Live"
    finally:
        context.close()
        if server.proc is None:
            server.start()

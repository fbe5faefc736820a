"""The inbox's badges and browser notifications in real headless Chromium against a real
uvicorn server: an approver watching the approval queue sees the navigation's badge count
an approval that arrives live (the time it took is printed: the badge update latency), the
inbox lists it, and with notifications turned on a second one is announced by the browser's
Notification API (recorded by a stand-in: headless Chromium shows none). No console errors.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.e2e_site import seeded_site, signed_in
from tests.support.live_server import manage

pytestmark = pytest.mark.slow

WAIT_MS = 20_000
PASSWORD = "pw-inbox-e2e-1618"

MAKE_PEOPLE = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sagaboard.models import Project
project = Project.objects.create(slug="shop", name="Shop")
ann = get_user_model().objects.create_user("ann", password={PASSWORD!r})
ann.groups.add(Group.objects.get(name="approver"))
project.members.add(ann)
"""
ASK = """
from sagaboard.models import Project
from tests.support.hitl import waiting
waiting(Project.objects.get(slug="shop"), {saga_id!r})
"""
# Headless Chromium shows no notifications: a stand-in records what the page asks for.
RECORD_NOTIFICATIONS = """
window.__shown = [];
class Recorded { constructor(title, options) { window.__shown.push([title, options.body]); } }
Recorded.permission = "granted";
Recorded.requestPermission = () => Promise.resolve("granted");
window.Notification = Recorded;
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with seeded_site(tmp_path_factory.mktemp("e2e-inbox"), MAKE_PEOPLE) as found:
        yield found


@pytest.fixture
def ann(site: tuple[str, str]) -> Iterator[Any]:
    base, _ = site
    with signed_in(
        base, "ann", PASSWORD, wait_ms=WAIT_MS, init_script=RECORD_NOTIFICATIONS
    ) as page:
        yield page


def test_a_live_approval_counts_on_the_badge_and_is_announced(
    site: tuple[str, str], ann: Any
) -> None:
    from playwright.sync_api import expect

    base, url = site
    ann.goto(base + "/inbox/")
    expect(ann.locator("#nav-badges .nav-badges")).to_have_attribute("data-approvals", "0")
    ann.click("#notify-on")
    expect(ann.locator("#notify-state")).to_contain_text("On:")

    ann.goto(base + "/approvals/")  # a page with a live feed
    expect(ann.locator("#nav-badges .nav-badges")).to_have_attribute("data-approvals", "0")
    asked = time.monotonic()
    manage(url, "shell", "-c", ASK.format(saga_id="s-1"))
    stored = time.monotonic()
    badge = ann.locator("#nav-badges a.nav-badge-approvals")
    expect(badge).to_contain_text("1 approval waits for your vote")
    shown = time.monotonic()
    print(f"\nbadge update: {(shown - stored) * 1000:.0f} ms after the approval was stored "
          f"({(shown - asked) * 1000:.0f} ms after the shell began)")  # fmt: skip
    manage(url, "shell", "-c", ASK.format(saga_id="s-2"))
    expect(ann.locator("#nav-badges .nav-badges")).to_have_attribute("data-approvals", "2")
    shown_by = ann.evaluate("window.__shown")
    assert any("approvals wait for your vote" in body for _, body in shown_by), shown_by

    badge.click()  # leads to the approval queue
    ann.goto(base + "/inbox/")
    expect(ann.locator("#inbox-approvals")).to_contain_text("(2)")
    expect(ann.locator("section[aria-labelledby=inbox-approvals] li")).to_have_count(2)


def test_a_page_without_a_live_body_counts_a_live_approval_too(
    site: tuple[str, str], ann: Any
) -> None:
    """The tools page has no feed of its own: the navigation's ping feed wakes its badges."""
    from playwright.sync_api import expect

    base, url = site
    ann.goto(base + "/tools/")
    counts = ann.locator("#nav-badges .nav-badges")
    expect(counts).to_have_attribute("data-approvals", re.compile(r"\d+"))
    before = int(counts.get_attribute("data-approvals") or "0")
    manage(url, "shell", "-c", ASK.format(saga_id="s-3"))
    stored = time.monotonic()
    # Well within the 30 s poll: the ping arrives with the event.
    expect(counts).to_have_attribute("data-approvals", str(before + 1), timeout=10_000)
    print(f"\nbadge on a page without a feed: {(time.monotonic() - stored) * 1000:.0f} ms")


def test_the_overview_shows_a_new_approval_live(site: tuple[str, str], ann: Any) -> None:
    from playwright.sync_api import expect

    base, url = site
    ann.goto(base + "/overview/")
    waiting = ann.locator("#overview-live a[href*='waiting=1'] strong")
    expect(waiting).to_have_text(re.compile(r"\d+"))
    before = int(waiting.inner_text())
    manage(url, "shell", "-c", ASK.format(saga_id="s-4"))
    stored = time.monotonic()
    expect(waiting).to_have_text(str(before + 1), timeout=10_000)
    expect(ann.locator("#overview-live table.attention")).to_contain_text("s-4")
    print(f"\noverview live: {(time.monotonic() - stored) * 1000:.0f} ms after it was stored")

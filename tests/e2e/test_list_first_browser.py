"""The saga list's table comes first (issue 31, OPERATOR_UX 4.3), in real headless Chromium
against a real uvicorn server: at 1280x800 and at 390x844 the first rows are on screen
without scrolling, with no filter on and with several; the filters are a closed panel whose
summary counts those that are on, each shown as a chip that takes it off the list.
Screenshots: test-artifacts/saga-list-1280.png and saga-list-390.png.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.chromium import ARTIFACTS, chromium
from tests.support.e2e_site import seeded_site

pytestmark = pytest.mark.slow

WAIT_MS = 15_000
PASSWORD = "pw-list-e2e-1380"
VIEWPORTS = [(1280, 800), (390, 844)]
FILTERED = "/?status=ROLLED_BACK&tool=charge_card&error=acme&owner=none&since=7d"

MAKE_SAGAS = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sagaboard.models import Project
from tests.support.search_world import build

project = Project.objects.create(slug="shop", name="Shop")
vic = get_user_model().objects.create_user("vic", password={PASSWORD!r})
vic.groups.add(Group.objects.get(name="operator"))
project.members.add(vic)
build(project)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with seeded_site(tmp_path_factory.mktemp("e2e-list"), MAKE_SAGAS) as (base, _):
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(WAIT_MS) as launched:
        yield launched


def signed_in(browser: Any, site: str, width: int, height: int) -> Any:
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(site + "/login/")
    page.fill("input[name=username]", "vic")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#saga-rows")
    return page


def first_row_top(page: Any) -> float:
    box = page.locator("#saga-rows > tr").first.bounding_box()
    assert box is not None
    return float(box["y"])


@pytest.mark.parametrize(("width", "height"), VIEWPORTS)
def test_the_first_rows_are_on_screen_without_scrolling(
    site: str, browser: Any, width: int, height: int
) -> None:
    from playwright.sync_api import expect

    page = signed_in(browser, site, width, height)
    try:
        for path in ("/", FILTERED):
            page.goto(site + path)
            expect(page.locator("#saga-rows > tr").first).to_be_visible()
            assert page.evaluate("window.scrollY") == 0
            top = first_row_top(page)
            # The header row and the first saga row both fit (a row is ~60 px).
            assert top + 60 < height, f"{path} at {width}x{height}: first row at {top:.0f} px"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"saga-list-{width}.png"))
    finally:
        page.context.close()


def test_the_filters_that_are_on_are_counted_and_each_chip_takes_one_off(
    site: str, browser: Any
) -> None:
    from playwright.sync_api import expect

    page = signed_in(browser, site, 1280, 800)
    try:
        page.goto(site + FILTERED)
        panel = page.locator("details.filter-panel")
        expect(panel).not_to_have_attribute("open", "")
        expect(panel.locator("summary")).to_have_text("Filters (5 on)")
        chips = page.locator("ul.filter-chips a.chip .chip-label")
        expect(chips).to_have_text([
            "Status: ROLLED_BACK", "Tool: charge_card", "Error: acme", "Owner: none",
            "Updated: last 7 days",
        ])  # fmt: skip
        expect(page.locator("#saga-rows > tr")).to_have_count(1)  # s-failed
        page.get_by_role("link", name="Remove the filter Tool: charge_card").click()
        expect(panel.locator("summary")).to_have_text("Filters (4 on)")
        assert "tool=" not in page.url and "error=acme" in page.url
        page.get_by_role("link", name="Clear all filters").click()
        expect(page.locator("ul.filter-chips")).to_have_count(0)
        expect(panel.locator("summary")).to_have_text("Filters")
        expect(page.locator("#saga-rows > tr")).to_have_count(5)
        # The panel opens on a click and holds every filter, the help and the quick ranges.
        panel.locator("summary").click()
        expect(panel.locator("select[name=status]")).to_be_visible()
        expect(panel.locator("#search-help")).to_contain_text("Plain words find a saga")
        panel.locator("select[name=status]").select_option("ROLLED_BACK")
        panel.get_by_role("button", name="Filter").click()
        expect(page.locator("ul.filter-chips .chip-label")).to_have_text(["Status: ROLLED_BACK"])
    finally:
        page.context.close()

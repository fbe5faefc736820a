"""Accessibility and layout in real headless Chromium, on every page, in both themes.

Against a live server holding the demo (tests/support/demo_site.py: sagas in every state,
a ROLLBACK_FAILED one, an approval waiting, a policy, a token, audit entries):

- axe-core (vendored from npm into static/vendor/axe.min.js, loaded by no page) finds no
  serious or critical violation of WCAG 2.0/2.1 A and AA (and 2.2 AA: target sizes) on any
  page in the light theme, and none of its colour rules in the dark one (the markup, names
  and roles are the same in both: only the colours change);
- at a 390 px phone width no page scrolls sideways (tables scroll in their own box, the
  navigation wraps) and every navigation link is on screen;
- the theme toggle in the header sets data-theme, is remembered across a reload, and
  "system" gives the choice back to prefers-color-scheme; no page logs a console error
  (a CSP refusal of an inline script or style would).

How axe gets in: the CSP allows only same-origin script files, so a <script> tag with the
file's text (``page.add_script_tag``) would be refused. The test runs the file's text with
``page.evaluate``, which goes through the DevTools protocol and is not subject to the page's
CSP; the CSP itself stays on, so the pages are checked exactly as served.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.chromium import chromium
from tests.support.demo_site import PAGES, PUBLIC_PAGES, demo_site, log_in
from tests.support.live_server import ROOT, Server

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
WAIT_MS = 10_000
AXE = ROOT / "static" / "vendor" / "axe.min.js"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
BLOCKING = {"serious", "critical"}
PHONE = {"width": 390, "height": 844}
DARK_BG = "rgb(13, 17, 23)"  # --bg of the dark theme
LIGHT_BG = "rgb(255, 255, 255)"

COLOUR_RULES = ["color-contrast", "link-in-text-block"]
"""What a theme changes: the dark theme is checked with these rules only."""

RUN_AXE = """async (only) => {
  const result = await axe.run(document, {runOnly: only, resultTypes: ["violations"]});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map(n => n.target.join(" ") + " :: " + n.failureSummary),
  }));
}"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with demo_site("postgres" if PG else "sqlite", tmp_path_factory.mktemp("a11y")) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(WAIT_MS) as launched:
        yield launched


@pytest.fixture(scope="module")
def session(browser: Any, site: Server) -> Any:
    return log_in(browser, site.url)


def _open(context: Any, url: str, errors: list[str]) -> Any:
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)

    def console(message: Any) -> None:
        expected = url.endswith(PUBLIC_PAGES["not-found"]) and "404 (Not Found)" in message.text
        if message.type == "error" and not expected:
            errors.append(f"{url}: {message.text}")

    page.on("console", console)
    page.on("pageerror", lambda e: errors.append(f"{url}: {e}"))
    return page


def _pages(site: Server, session: Any) -> list[tuple[str, str, Any]]:
    """(name, url, storage state) of every page: signed in, then the public ones."""
    signed_in = [(name, site.url + path, session) for name, path in PAGES.items()]
    public = [
        ("login", site.url + PUBLIC_PAGES["login"], None),
        ("not-found", site.url + PUBLIC_PAGES["not-found"], session),
    ]
    return signed_in + public


def _violations(page: Any, theme: str = "light") -> list[dict[str, Any]]:
    """Serious and critical violations: every WCAG rule in the light theme, the colour
    rules in the dark one."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text())
    only = (
        {"type": "rule", "values": COLOUR_RULES}
        if theme == "dark"
        else {"type": "tag", "values": TAGS}
    )
    found: list[dict[str, Any]] = page.evaluate(RUN_AXE, only)
    return [v for v in found if v["impact"] in BLOCKING]


def _describe(failures: dict[str, list[dict[str, Any]]]) -> str:
    lines = []
    for where, violations in failures.items():
        for v in violations:
            lines.append(f"{where}: {v['impact']} {v['id']} ({v['help']})")
            lines += [f"    {node}" for node in v["nodes"]]
    return "\n".join(lines)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_axe_finds_no_serious_violation_on_any_page(
    browser: Any, site: Server, session: Any, theme: str
) -> None:
    failures: dict[str, list[dict[str, Any]]] = {}
    errors: list[str] = []
    checked = []
    for name, url, state in _pages(site, session):
        context = browser.new_context(
            viewport={"width": 1280, "height": 900}, color_scheme=theme, storage_state=state
        )
        try:
            page = _open(context, url, errors)
            response = page.goto(url)
            assert response is not None
            assert response.status == (404 if name == "not-found" else 200), url
            background = page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert background == (DARK_BG if theme == "dark" else LIGHT_BG), (name, background)
            if violations := _violations(page, theme):
                failures[f"{theme} {name}"] = violations
            checked.append(name)
        finally:
            context.close()
    assert not failures, "axe found serious/critical violations:\n" + _describe(failures)
    assert not errors, errors
    assert len(checked) == len(PAGES) + len(PUBLIC_PAGES)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_axe_finds_no_serious_violation_in_the_keyboard_dialogs(
    browser: Any, site: Server, session: Any, theme: str
) -> None:
    """The shortcuts dialog (``?``) over a list with its current row marked, and the queue's
    decision dialog (``a``), open and checked by axe like any page."""
    from playwright.sync_api import expect

    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, color_scheme=theme, storage_state=session
    )
    errors: list[str] = []
    failures: dict[str, list[dict[str, Any]]] = {}
    try:
        for name, key, dialog in (
            ("saga-list", "?", "Keyboard shortcuts"),
            ("saga-rollback-failed", "?", "Keyboard shortcuts"),
            ("approval-queue", "a", "Approve this undo?"),
        ):
            page = _open(context, site.url + PAGES[name], errors)
            page.goto(site.url + PAGES[name])
            page.locator("h1").click()
            page.keyboard.press("j")
            page.keyboard.press(key)
            expect(page.get_by_role("dialog", name=dialog)).to_be_visible()
            if violations := _violations(page, theme):
                failures[f"{theme} {name} with the {dialog!r} dialog"] = violations
            page.close()
    finally:
        context.close()
    assert not failures, "axe found serious/critical violations:\n" + _describe(failures)
    assert not errors, errors


def test_the_check_catches_a_violation(browser: Any, site: Server, session: Any) -> None:
    """The harness itself: an unlabelled field and an image without a text alternative,
    added to a real page, are reported (so an empty result means something)."""
    context = browser.new_context(storage_state=session)
    try:
        page = context.new_page()
        page.goto(site.url + PAGES["saga-list"])
        page.evaluate(
            "document.querySelector('main').insertAdjacentHTML('beforeend',"
            " '<input type=text name=unlabelled><img src=/static/sagaboard/favicon.svg>')"
        )
        ids = {v["id"] for v in _violations(page)}
        assert {"label", "image-alt"} <= ids, ids
    finally:
        context.close()


def test_the_dark_themes_check_catches_poor_contrast(
    browser: Any, site: Server, session: Any
) -> None:
    """The dark theme's colour-only check: dim text on the dark background is reported."""
    context = browser.new_context(color_scheme="dark", storage_state=session)
    try:
        page = context.new_page()
        page.goto(site.url + PAGES["saga-list"])
        # Set through the CSSOM: the CSP refuses a style attribute in inserted markup.
        page.evaluate(
            "const p = document.createElement('p'); p.textContent = 'barely there';"
            " p.style.color = 'rgb(40, 44, 52)'; document.querySelector('main').append(p)"
        )
        assert "color-contrast" in {v["id"] for v in _violations(page, "dark")}
    finally:
        context.close()


def test_the_saga_pages_checked_hold_the_states_that_matter(
    browser: Any, site: Server, session: Any
) -> None:
    """What axe looked at is what matters: a ROLLBACK_FAILED step with its controls and
    attempts, a step whose undo waits for approval, a rejected one, and the queue's card."""
    context = browser.new_context(storage_state=session)
    try:
        page = context.new_page()
        shown: set[str] = set()
        for name in ("saga-rollback-failed", "saga-awaiting", "saga-rejected"):
            page.goto(site.url + PAGES[name])
            shown |= set(page.locator(".timeline .status").all_inner_texts())
        assert {"ROLLBACK_FAILED", "AWAITING_APPROVAL", "REJECTED", "COMPLETED"} <= shown, shown
        page.goto(site.url + PAGES["approval-queue"])
        assert page.locator("li.approval").count() >= 1
        page.goto(site.url + PAGES["policies"])
        assert page.locator("table.policies tbody tr[id^=policy-]").count() >= 1
    finally:
        context.close()


def test_no_page_scrolls_sideways_on_a_phone(browser: Any, site: Server, session: Any) -> None:
    too_wide = {}
    off_screen = {}
    errors: list[str] = []
    for name, url, state in _pages(site, session):
        context = browser.new_context(viewport=PHONE, storage_state=state, is_mobile=True)
        try:
            page = _open(context, url, errors)
            page.goto(url)
            # Against the phone's width, not innerWidth: a mobile browser widens its layout
            # viewport to content that overflows, so innerWidth grows with the fault.
            widths = page.evaluate("[document.scrollingElement.scrollWidth, window.innerWidth]")
            if max(widths) > PHONE["width"]:
                too_wide[name] = widths
            rights = page.evaluate(
                "[...document.querySelectorAll('header.top :is(a, button, select)')]"
                ".filter(e => e.offsetParent).map(e => e.getBoundingClientRect().right)"
            )
            if any(right > PHONE["width"] for right in rights):
                off_screen[name] = rights
        finally:
            context.close()
    assert not too_wide, f"pages wider than the phone (scrollWidth, innerWidth): {too_wide}"
    assert not off_screen, f"header controls past the right edge: {off_screen}"
    assert not errors, errors


def test_a_wide_table_scrolls_in_its_own_box_on_a_phone(
    browser: Any, site: Server, session: Any
) -> None:
    context = browser.new_context(viewport=PHONE, storage_state=session, is_mobile=True)
    try:
        page = context.new_page()
        page.goto(site.url + PAGES["audit"])
        box = page.locator(".table-scroll").first
        scroll, client = box.evaluate("e => [e.scrollWidth, e.clientWidth]")
        assert scroll > client, "the audit table fits a phone: this test proves nothing"
        assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
    finally:
        context.close()


def test_the_theme_toggle_is_remembered_and_system_follows_the_os(
    browser: Any, site: Server, session: Any
) -> None:
    context = browser.new_context(color_scheme="light", storage_state=session)
    errors: list[str] = []
    try:
        page = _open(context, site.url + "/", errors)
        page.goto(site.url + "/")
        toggle = page.get_by_label("Theme")
        assert toggle.is_visible() and toggle.input_value() == "system"
        assert page.evaluate("document.documentElement.dataset.theme") is None

        toggle.select_option("dark")
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == DARK_BG

        # Another page, loaded fresh: dark from the first paint (theme.js runs in <head>).
        page.goto(site.url + PAGES["overview"], wait_until="commit")
        page.wait_for_selector("html[data-theme=dark]", state="attached")
        page.wait_for_load_state("load")
        assert page.get_by_label("Theme").input_value() == "dark"
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == DARK_BG

        page.get_by_label("Theme").select_option("system")
        assert page.evaluate("document.documentElement.dataset.theme") is None
        assert page.evaluate("localStorage.getItem('sagaboard-theme')") is None
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == LIGHT_BG

        page.get_by_label("Theme").select_option("light")
        page.emulate_media(color_scheme="dark")  # the OS turns dark; the choice holds
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == LIGHT_BG
    finally:
        context.close()
    assert not errors, errors


def test_keyboard_focus_is_visible(browser: Any, site: Server, session: Any) -> None:
    """Tab from the top: the skip link first, then the navigation, each with an outline."""
    context = browser.new_context(storage_state=session)
    try:
        page = context.new_page()
        page.goto(site.url + PAGES["overview"])
        page.keyboard.press("Tab")
        first = page.evaluate("document.activeElement.textContent.trim()")
        assert first == "Skip to content"
        for _ in range(3):
            page.keyboard.press("Tab")
            outline = page.evaluate(
                "(() => { const s = getComputedStyle(document.activeElement);"
                " return [s.outlineStyle, parseFloat(s.outlineWidth)]; })()"
            )
            assert outline[0] != "none" and outline[1] >= 2, outline
    finally:
        context.close()

"""The frame every page shares (templates/_base.html): the theme is set before first paint
by a static script (no inline script under the CSP), a skip link and named landmarks, the
current page marked in the navigation, and every data table in its own scroll box."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from sagaboard.models import Project

TEMPLATES = Path(__file__).resolve().parents[3] / "templates"

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client: Client) -> Client:
    shop = Project.objects.create(slug="shop", name="Shop")
    user = get_user_model().objects.create_user("vera", password="pw-vera-123")
    shop.members.add(user)
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    return client


def _head(page: str) -> str:
    return page[: page.index("</head>")]


def test_the_theme_script_runs_blocking_before_the_stylesheet(client: Client) -> None:
    page = client.get("/login/").content.decode()
    head = _head(page)
    theme = re.search(r'<script src="[^"]*sagaboard/theme\.js"></script>', head)
    assert theme, "theme.js must be a plain (blocking) script in <head>"
    assert theme.start() < head.index('rel="stylesheet"'), "theme.js must run before the CSS"
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page), "an inline script"
    assert " style=" not in page, "a style attribute (the CSP refuses them)"


def test_the_theme_toggle_offers_system_light_and_dark(client: Client) -> None:
    page = client.get("/login/").content.decode()
    toggle = re.search(r'<label class="theme-choice" hidden>Theme\s*<select id="theme-choice">'
                       r"(.*?)</select>", page, re.S)  # fmt: skip
    assert toggle, "the toggle is hidden until theme.js shows it (it does nothing without JS)"
    assert re.findall(r'value="(\w+)"', toggle.group(1)) == ["system", "light", "dark"]


def test_landmarks_skip_link_and_current_page(viewer: Client) -> None:
    page = viewer.get("/overview/").content.decode()
    assert '<a class="skip-link" href="#main">Skip to content</a>' in page
    assert '<main id="main" tabindex="-1">' in page
    assert '<nav aria-label="Main">' in page
    current = re.findall(r'<a href="([^"]+)" aria-current="page">', page)
    assert current == ["/overview/"]
    page = viewer.get("/").content.decode()
    assert re.findall(r'<a href="([^"]+)" aria-current="page">', page) == ["/"]


BOXED = re.compile(
    r'<div class="table-scroll" tabindex="0" role="region" aria-label="[^"]+">\s*<table\b'
)


def test_every_data_table_scrolls_in_its_own_box(viewer: Client) -> None:
    """On a phone a table scrolls inside its box (keyboard-scrollable: focusable, named),
    never the page: every <table> of every template sits directly in one."""
    for template in TEMPLATES.rglob("*.html"):
        text = template.read_text()
        tables = len(re.findall(r"<table\b", text))
        assert len(BOXED.findall(text)) == tables, f"{template}: a <table> outside .table-scroll"
    page = viewer.get("/").content.decode()
    assert len(BOXED.findall(page)) == len(re.findall(r"<table\b", page)) == 1

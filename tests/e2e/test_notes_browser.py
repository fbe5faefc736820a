"""Notes and owners in real headless Chromium against a real uvicorn server: an operator
assigns a saga to themselves, writes a Markdown note about a step (a script in it stays
text), edits it (the history shows the old text), and the list shows the owner and the note
count and finds the saga under "Assigned to me". No console errors.
Screenshots (the notes section, light and dark): test-artifacts/saga-notes-*.png.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.chromium import ARTIFACTS, chromium
from tests.support.live_server import ROOT, Server, manage, temp_database

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
WAIT_MS = 15_000
PASSWORD = "pw-notes-e2e-3141"

MAKE_SAGAS = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sagaboard.models import Project
from tests.support.search_world import build

project = Project.objects.create(slug="shop", name="Shop")
ann = get_user_model().objects.create_user("ann", password={PASSWORD!r})
ann.groups.add(Group.objects.get(name="operator"))
project.members.add(ann)
build(project)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    kind = "postgres" if PG else "sqlite"
    with temp_database(kind, tmp_path_factory.mktemp("e2e-notes")) as url:
        manage(url, "migrate", "--no-input", "-v0")
        env = {**os.environ, "DATABASE_URL": url}
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", MAKE_SAGAS],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, f"manage.py shell failed:\n{done.stdout}\n{done.stderr}"
        with Server(url, debug=False) as server:
            yield server.url


@pytest.fixture
def ann(tmp_path_factory: pytest.TempPathFactory, site: str) -> Iterator[Any]:
    with chromium(WAIT_MS) as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(site + "/login/")
        page.fill("input[name=username]", "ann")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_selector("#saga-rows")
        yield page
        assert errors == [], errors
        assert dialogs == [], dialogs  # no alert() from a note's text
        context.close()


def test_assign_write_edit_and_find_a_note(site: str, ann: Any) -> None:
    from playwright.sync_api import expect

    ann.goto(site + "/sagas/shop/s-failed/")
    ann.click("text=Assign to me")
    expect(ann.locator("#owner")).to_contain_text("Owner: ann")

    ann.fill("#note-new", "Gateway **down** since 10:00 <script>alert(1)</script>")
    ann.select_option("select[name=step]", label="step-2 · charge_card")
    ann.click("text=Add note")
    note = ann.locator("li.note").first
    expect(note.locator("strong", has_text="down")).to_have_count(1)
    expect(note).to_contain_text("<script>alert(1)</script>")  # shown as text
    expect(ann.locator("a.note-flag", has_text="1 note")).to_have_count(1)  # on its step

    note.locator("summary", has_text="Edit").click()
    note.locator("textarea").fill("Gateway back at 10:40")
    note.locator("button", has_text="Save").click()
    note = ann.locator("li.note").first
    expect(note.locator(".note-body")).to_contain_text("Gateway back at 10:40")
    note.locator("summary", has_text="History").click()
    expect(note.locator("pre.note-old")).to_contain_text("Gateway **down** since 10:00")
    ARTIFACTS.mkdir(exist_ok=True)
    ann.locator("#notes").screenshot(path=str(ARTIFACTS / "saga-notes-light.png"))
    ann.emulate_media(color_scheme="dark")
    ann.locator("#notes").screenshot(path=str(ARTIFACTS / "saga-notes-dark.png"))
    ann.emulate_media(color_scheme="light")

    ann.goto(site + "/")
    ann.click("text=Assigned to me")
    rows = ann.locator("#saga-rows tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("s-failed")
    expect(rows.first).to_contain_text("ann")
    expect(rows.first.locator("a.note-flag")).to_have_text("1 note")

"""Notes and owners in real headless Chromium against a real uvicorn server: an operator
assigns a saga to themselves, writes a Markdown note about a step (a script in it stays
text), edits it (the history shows the old text), and the list shows the owner and the note
count and finds the saga under "Assigned to me". No console errors.
Screenshots (the notes section, light and dark): test-artifacts/saga-notes-*.png.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.chromium import ARTIFACTS
from tests.support.e2e_site import seeded_site, signed_in

pytestmark = pytest.mark.slow

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
    with seeded_site(tmp_path_factory.mktemp("e2e-notes"), MAKE_SAGAS) as (base, _):
        yield base


@pytest.fixture
def ann(site: str) -> Iterator[Any]:
    with signed_in(site, "ann", PASSWORD, wait_ms=WAIT_MS) as page:
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        yield page
        assert dialogs == [], dialogs  # no alert() from a note's text


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

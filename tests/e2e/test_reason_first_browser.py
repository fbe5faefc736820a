"""A reason first, then the confirmation (issue 31), in real headless Chromium against a real
uvicorn server: force-resolve and leave-failed with no reason are refused by the form itself
(the field is ``required``), before any confirm dialog and without a request; with a reason,
the dialog asks, and only then is anything sent. A retry needs no reason (its button is
``formnovalidate``). The same on the saga page, and on the needs-attention page for one
failure, an error group and a selection. (The server still refuses a missing reason with a
400: tests/sagaboard/actions/test_hitl_pages.py.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.chromium import chromium
from tests.support.live_server import Server, manage, temp_database

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
WAIT_MS = 15_000
PASSWORD = "pw-reason-e2e-1414"

MAKE_SAGAS = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sagaboard.demo.flows import storebot_server_saga
from sagaboard.actions.services import runner
from sagaboard.models import Project

project = Project.objects.create(slug="shop", name="Shop")
olga = get_user_model().objects.create_user("olga", password={PASSWORD!r})
olga.groups.add(Group.objects.get(name="operator"))
project.members.add(olga)
for saga_id in ("f-1", "f-2"):
    saga = storebot_server_saga(project, saga_id, refund_needs_approval=False, return_fails_first=9)
    runner.rollback_continue(saga.pk)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with temp_database(
        "postgres" if PG else "sqlite", tmp_path_factory.mktemp("e2e-reason")
    ) as url:
        manage(url, "migrate", "--no-input", "-v0")
        manage(url, "shell", "-c", MAKE_SAGAS)
        # Eager: the one retry this test sends runs in the request (no broker, no worker).
        with Server(url, env={"SAGABOARD_TASKS_EAGER": "1"}) as server:
            yield server.url


class Olga:
    """A logged-in operator's page, with every dialog it opened and every action it sent."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.sent: list[str] = []
        self.accept = False
        page.on("dialog", self._dialog)
        page.on("request", lambda r: self.sent.append(r.url) if r.method == "POST" else None)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        if self.accept:
            dialog.accept()
        else:
            dialog.dismiss()

    def refused_by_the_form(self, form: Any, button: str) -> None:
        """``button`` pressed with the reason empty: the field says it is required, no dialog
        opened and nothing was sent."""
        reason = form.locator("input[name=reason]")
        reason.fill("")
        form.get_by_role("button", name=button).click()
        self.page.wait_for_timeout(300)  # a dialog or a request would have come by now
        assert self.dialogs == [] and self.sent == [], (button, self.dialogs, self.sent)
        assert reason.evaluate("el => el.validity.valueMissing"), button
        assert reason.evaluate("el => el.matches(':invalid')"), button

    def asked_then_nothing_sent(self, form: Any, button: str, reason: str) -> None:
        """With a reason the dialog asks; dismissed, nothing is sent."""
        form.locator("input[name=reason]").fill(reason)
        form.get_by_role("button", name=button).click()
        self.page.wait_for_timeout(300)
        assert len(self.dialogs) == 1 and self.sent == [], (button, self.dialogs, self.sent)
        self.dialogs.clear()


@pytest.fixture
def olga(site: str) -> Iterator[Olga]:
    with chromium(WAIT_MS) as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(site + "/login/")
        page.fill("input[name=username]", "olga")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_selector("#saga-rows")
        yield Olga(page)
        assert errors == [], errors
        context.close()


def test_on_the_saga_page_a_missing_reason_is_said_before_any_dialog(site: str, olga: Olga) -> None:
    from playwright.sync_api import expect

    page = olga.page
    page.goto(site + "/sagas/shop/f-1/")
    form = page.locator("form.act")
    expect(form).to_have_count(1)
    for button in ("Force-resolve", "Leave failed"):
        olga.refused_by_the_form(form, button)
        olga.asked_then_nothing_sent(form, button, "handled by hand")
    # A retry asks for no reason and no confirmation: it is sent at once.
    form.locator("input[name=reason]").fill("")
    form.get_by_role("button", name="Retry undo").click()
    expect(page.locator("#flash")).to_contain_text("Retry failed: return_item (step-1)")
    assert olga.dialogs == [] and len(olga.sent) == 1 and olga.sent[0].endswith("/action/")


def test_on_the_attention_page_too_for_one_a_group_and_a_selection(site: str, olga: Olga) -> None:
    from playwright.sync_api import expect

    page = olga.page
    page.goto(site + "/attention/")
    failure = page.locator("li.failure").first
    expect(page.locator("li.failure")).to_have_count(2)
    act = failure.locator("form.act")
    for button in ("Force-resolve", "Leave failed"):
        olga.refused_by_the_form(act, button)
        olga.asked_then_nothing_sent(act, button, "handled by hand")
    group = page.locator("section.group form.bulk")
    olga.refused_by_the_form(group, "Resolve all 2")
    olga.asked_then_nothing_sent(group, "Resolve all 2", "handled by hand")
    failure.locator("input[type=checkbox]").check()
    selection = page.locator("#bulk-steps")
    olga.refused_by_the_form(selection, "Resolve selected")
    olga.asked_then_nothing_sent(selection, "Resolve selected", "handled by hand")
    # With a reason and the dialog accepted, the resolve is sent (and done).
    olga.accept = True
    act.locator("input[name=reason]").fill("refunded by hand in the Stripe dashboard")
    act.get_by_role("button", name="Force-resolve").click()
    expect(page.locator("#flash")).to_contain_text("Force-resolve done: return_item (step-1)")
    assert len(olga.dialogs) == 1 and len(olga.sent) == 1

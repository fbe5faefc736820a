"""Deciding from a mailed link in real headless Chromium against a real uvicorn server: the
approval asked for mails each approver a personal link (sent through Django's locmem mail
backend, read from its outbox); opened after login, the link shows the confirm page (nothing
decided yet), Approve with a reason decides, and the link then says it was used. No console
errors. Screenshots of the confirm page (light, dark): test-artifacts/decide-link-*.png.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.chromium import ARTIFACTS
from tests.support.e2e_site import seeded_site, signed_in
from tests.support.live_server import LIVE_SECRET_KEY, manage

pytestmark = pytest.mark.slow

WAIT_MS = 15_000
PASSWORD = "pw-decide-e2e-2718"

MAKE_PEOPLE = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sagaboard.models import Project
from tests.support.hitl import waiting
project = Project.objects.create(slug="shop", name="Shop")
for name in ("ann", "cat"):
    user = get_user_model().objects.create_user(
        name, email=f"{{name}}@shop.example", password={PASSWORD!r})
    user.groups.add(Group.objects.get(name="approver"))
    project.members.add(user)
waiting(project, "s-1")
"""
# The worker's part, in one process with the locmem backend: send the outbox's mails, print them.
# Signed with the server's key (LIVE_SECRET_KEY), or the server would take the links as forged.
SEND_MAILS = f"""
from django.core import mail
from django.test.utils import override_settings
from sagaboard.notify.services import notifications
from sagaboard.models import Notification
locmem = {{"default": {{"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}}}
with override_settings(MAILERS=locmem, SECRET_KEY={LIVE_SECRET_KEY!r}):
    for pk in Notification.objects.filter(kind="approval.email").values_list("pk", flat=True):
        assert notifications.notification_send(pk)
    for message in mail.outbox:
        print("MAIL", message.to[0], message.subject)
        print(message.body)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with seeded_site(tmp_path_factory.mktemp("e2e-decide"), MAKE_PEOPLE) as found:
        yield found


@pytest.fixture
def ann(site: tuple[str, str]) -> Iterator[Any]:
    base, _ = site
    with signed_in(base, "ann", PASSWORD, wait_ms=WAIT_MS) as page:
        yield page


def _mailed_paths(database_url: str) -> dict[str, str]:
    out = manage(database_url, "shell", "-c", SEND_MAILS)
    mails = out.split("MAIL ")[1:]
    return {m.split()[0]: re.findall(r"https?://[^/\s]+(/decide/[^/\s]+/)", m)[0] for m in mails}


def test_a_mailed_link_opens_the_confirm_page_and_decides_once(
    site: tuple[str, str], ann: Any
) -> None:
    from playwright.sync_api import expect

    base, url = site
    paths = _mailed_paths(url)
    assert sorted(paths) == ["ann@shop.example", "cat@shop.example"]
    ann.goto(base + paths["ann@shop.example"])
    expect(ann.locator("h1")).to_contain_text("Undo refund_payment?")
    expect(ann.locator(".approval-votes")).to_contain_text("0 of 1 approvals")
    expect(ann.locator(".runs")).to_contain_text("storebot.refund_payment")
    ARTIFACTS.mkdir(exist_ok=True)
    ann.screenshot(path=str(ARTIFACTS / "decide-link-light.png"), full_page=True)
    ann.emulate_media(color_scheme="dark")
    ann.screenshot(path=str(ARTIFACTS / "decide-link-dark.png"), full_page=True)
    ann.emulate_media(color_scheme="light")

    ann.fill("#decide-reason", "refund checked with the customer")
    ann.click("button.approve")
    expect(ann.locator("#decide-outcome")).to_have_text("Done: the undo is approved.")
    expect(ann.locator(".approval-status")).to_have_text("approved")
    expect(ann.locator("form.decide")).to_have_count(0)

    # The same link again, and cat's link opened by ann: refused with a page that says why
    # (asked with the page's cookies, not navigated: a 4xx page logs a console error).
    spent = ann.request.get(base + paths["ann@shop.example"])
    assert spent.status == 410 and "already used" in spent.text()
    foreign = ann.request.get(base + paths["cat@shop.example"])
    assert foreign.status == 403 and "sent to someone else" in foreign.text()

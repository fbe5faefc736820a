"""An outcome faster than its answer (issue 31), in real headless Chromium against a real
uvicorn server and a real Celery worker (Redis broker) on a throw-away database.

An operator retries a failed undo that fails again within milliseconds. Whether the page
hears the worker's attempt (live) before or after the retry's answer ("Retry requested"),
the one message ends as "Retry failed: ... (attempt 2)": the answer says where it is read
again, and the page reads it as it arrives and on every live update, until it is the
outcome. The first test holds the answer back until the live update has shown attempt #2
(the order in which the message used to stay "Retry requested" for good); the second lets
them race. A stop whose rollback fails at once is one red banner, with no green "Rollback
requested" beside it. No page logs a console error.

Redis: a database index of the fixture's own (``redis_database``: under xdist each process
that runs one of these tests sets up a site of its own, and two sites' workers on one index
would take each other's tasks); ``SAGABOARD_TEST_FAST_REDIS_URL`` names the server, or an
index to claim.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.chromium import chromium
from tests.support.live_server import (
    DEMO_UNDOS,
    REDIS_SERVER,
    ROOT,
    Server,
    Worker,
    manage,
    redis_database,
    temp_database,
)

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
REDIS_URL = os.environ.get("SAGABOARD_TEST_FAST_REDIS_URL", REDIS_SERVER)
WAIT_MS = 20_000
PASSWORD = "pw-fast-e2e-2236"

MAKE_SAGAS = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sagaboard.demo.flows import storebot_server_saga
from sagaboard.record.services import manual_flow
from sagaboard.models import Project

project = Project.objects.create(slug="shop", name="Shop")
olga = get_user_model().objects.create_user("olga", password={PASSWORD!r})
olga.groups.add(Group.objects.get(name="operator"))
project.members.add(olga)
# Rolled back by the worker to ROLLBACK_FAILED: return_item's undo fails every attempt.
for saga_id in ("f-1", "f-2"):
    storebot_server_saga(project, saga_id, refund_needs_approval=False, return_fails_first=9)
# Running, sagaboard's to run: its one undo fails at once when someone stops it.
manual_flow.saga_begin(project=project, event_id="r-1", name="storebot-return", saga_id="s-stop")
step = manual_flow.step_add(
    project=project, event_id="r-2", saga_id="s-stop", tool_name="return_item",
    input={{"itemId": "9"}},
    undo={{"kind": "handler", "handler": "storebot.return_item", "args": {{"fail_first": 9}}}},
)
manual_flow.step_complete(
    project=project, event_id="r-3", saga_id="s-stop", step_id=step, output={{"itemId": "9"}}
)
"""


@dataclass
class Site:
    url: str
    worker: Worker


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    workdir = tmp_path_factory.mktemp("e2e-fast")
    with (
        redis_database(REDIS_URL) as broker,
        temp_database("postgres" if PG else "sqlite", workdir) as url,
    ):
        manage(url, "migrate", "--no-input", "-v0")
        env = {
            **DEMO_UNDOS,
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "sagaboard.config.settings",
            "CELERY_BROKER_URL": broker,
            "SAGABOARD_TASKS_EAGER": "0",  # the worker runs the undos, not whoever enqueues
        }
        worker = Worker("fast", env, workdir, beat=False)
        try:
            with Server(url, env=env) as server:
                worker.wait_ready()
                done = subprocess.run(
                    [sys.executable, "manage.py", "shell", "-c", MAKE_SAGAS],
                    cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True,
                    timeout=120,
                )  # fmt: skip
                assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
                yield Site(server.url, worker)
        finally:
            worker.stop()


@pytest.fixture
def page(site: Site) -> Iterator[Any]:
    with chromium(WAIT_MS) as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        tab = context.new_page()
        tab.set_default_timeout(WAIT_MS)
        errors: list[str] = []
        tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.goto(site.url + "/login/")
        tab.fill("input[name=username]", "olga")
        tab.fill("input[name=password]", PASSWORD)
        tab.click("button[type=submit]")
        tab.wait_for_selector("#saga-rows")
        yield tab
        assert errors == [], errors
        context.close()
    site.worker.check_alive()


def attempts(page: Any) -> Any:
    step = page.locator("ol.timeline > li.step").filter(
        has=page.locator("h3", has_text="· return_item")
    )
    return step.locator("table.attempts tbody tr")


def failed_saga_page(page: Any, site: Site, saga_id: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{site.url}/sagas/shop/{saga_id}/")
    expect(page.locator("h1 > .status")).to_have_text("ROLLBACK_FAILED")  # live if need be
    expect(attempts(page)).to_have_count(1)


FAILED = (
    "Retry failed: return_item (step-1) in storebot-return: the undo failed again, the step is "
    "ROLLBACK_FAILED: warehouse return cancellation: upstream timed out (attempt 2)."
)


def test_a_retry_answered_after_its_failure_arrived_live_says_it_failed(
    site: Site, page: Any
) -> None:
    from playwright.sync_api import expect

    failed_saga_page(page, site, "f-1")
    held: list[Any] = []
    page.route("**/steps/*/action/", lambda route: held.append(route))  # held till released
    page.locator("form.act").get_by_role("button", name="Retry undo").click()
    for _ in range(100):
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the retry was never sent"
    answer = held[0].fetch()  # the server answers now; the page does not see it yet
    assert answer.status == 200
    # The worker's attempt #2 fails within milliseconds and the page shows it, live.
    expect(attempts(page)).to_have_count(2)
    expect(attempts(page).nth(1)).to_contain_text("failed")
    held[0].fulfill(response=answer)  # only now does the answer arrive
    flash = page.locator("#flash")
    expect(flash).to_have_text(FAILED)
    expect(flash).to_have_class("message error")
    expect(page.locator("main .message")).to_have_count(1)  # one message for the outcome


def test_a_retry_racing_its_failure_ends_as_the_failure(site: Site, page: Any) -> None:
    from playwright.sync_api import expect

    failed_saga_page(page, site, "f-2")
    page.locator("form.act").get_by_role("button", name="Retry undo").click()
    flash = page.locator("#flash")
    expect(flash).to_have_text(FAILED)
    expect(flash).to_have_class("message error")
    expect(attempts(page)).to_have_count(2)
    expect(page.locator("main .message")).to_have_count(1)


def test_a_stop_whose_rollback_fails_at_once_is_one_red_message(site: Site, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{site.url}/sagas/shop/s-stop/")
    page.fill("#stop-reason", "wrong customer")
    page.get_by_role("button", name="Request rollback").click()
    banner = page.locator("p.banner.error")
    expect(banner).to_contain_text("Rollback failed")  # at once, or live a moment later
    expect(page.locator("h1 > .status")).to_have_text("ROLLBACK_FAILED")
    expect(page.locator(".message.success")).to_have_count(0)
    shown = page.locator("main .message:visible, main .banner:visible")
    expect(shown).to_have_count(1)  # the red banner, no green "requested" beside it
    expect(page.locator("#stop-state")).to_have_class("muted")
    expect(page.locator("#stop-state")).to_contain_text("(carried out: the rollback failed")

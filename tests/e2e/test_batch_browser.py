"""Batch operations in real headless Chromium, with a real Celery worker: an operator picks
"all matching" on Needs attention, confirms the exact count with a reason, and watches the
job page's requests move (htmx polling, no reload) until every one is made: the job is then
finishing, not finished, and goes on polling (the agent's SDK carries a resolve out, and no
agent runs here: every item stays "still running"); a second job is cancelled from its page
while it runs. No console errors.

The worker paces the job (2 items a chunk, 0.4 s between chunks) so the page has time to
show it moving. Broker: Redis, on a database index (``redis_database``) and a queue of the
test's own (``tests.support.crash_settings``).
Screenshot: test-artifacts/batch-job-running.png.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.chromium import ARTIFACTS
from tests.support.e2e_site import PG, signed_in
from tests.support.live_server import (
    REDIS_SERVER,
    ROOT,
    Server,
    Worker,
    manage,
    redis_database,
    temp_database,
)

pytestmark = pytest.mark.slow

WAIT_MS = 20_000
PASSWORD = "pw-batch-e2e-2718"
REDIS = os.environ.get("SAGABOARD_TEST_REDIS_URL", REDIS_SERVER)  # a server, or an index
SETTINGS = "tests.support.crash_settings"
SEED = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from sagaboard.access.services.roles import roles_sync
from sagaboard.models import Project
from tests.support.batch_world import failed_undos

roles_sync(Group, Permission)
shop = Project.objects.create(slug="shop", name="Shop")
failed_undos(shop, 16, tool="refund_payment", prefix="rp")
failed_undos(shop, 30, tool="ship_parcel", prefix="sp")
ann = get_user_model().objects.create_user("ann", password={PASSWORD!r})
ann.groups.add(Group.objects.get(name="operator"))
shop.members.add(ann)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_database(REDIS) as broker:
        yield from _site(tmp_path_factory.mktemp("e2e-batch"), broker)


def _site(work: Path, broker: str) -> Iterator[str]:
    queue = f"sagaboard-batch-e2e-{uuid.uuid4().hex[:8]}"
    env = {
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
        "SAGABOARD_TEST_QUEUE": queue,
        "CELERY_BROKER_URL": broker,
        "SAGABOARD_TASKS_EAGER": "0",
        "SAGABOARD_BATCH_CHUNK": "2",
        "SAGABOARD_BATCH_PAUSE_SECONDS": "0.4",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with temp_database("postgres" if PG else "sqlite", work) as url:
            manage(url, "migrate", "--no-input", "-v0", settings=SETTINGS)
            manage(url, "shell", "-c", SEED, settings=SETTINGS)
            worker = Worker(
                "e2e",
                {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": SETTINGS},
                work,
                beat=False,
            )
            try:
                worker.wait_ready()
                with Server(url, settings=SETTINGS, env=env) as server:
                    yield server.url
            finally:
                worker.stop()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def ann(site: str) -> Iterator[Any]:
    with signed_in(site, "ann", PASSWORD, wait_ms=WAIT_MS) as page:
        page.on("dialog", lambda d: d.accept())  # "Cancel batch #2?": yes
        yield page


def _done_values(page: Any, total: int, until: str) -> list[int]:
    """The "Requests made: x of total" the page shows, sampled until its state reads ``until``."""
    seen: list[int] = []
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        text = page.locator("#batch-progress").inner_text()
        m = re.search(rf"Requests made: (\d+) of {total}", text)
        if m and (not seen or seen[-1] != int(m.group(1))):
            seen.append(int(m.group(1)))
        if page.locator(f"#batch-progress [data-state={until}]").count():
            return seen
        time.sleep(0.1)
    raise AssertionError(f"the page never read {until}: saw {seen}")


def test_all_matching_confirmed_then_followed_live_to_the_end(site: str, ann: Any) -> None:
    from playwright.sync_api import expect

    ann.goto(site + "/attention/")
    ann.click("text=Act on all matching a filter")
    ann.select_option("select[name=action]", "resolve")
    ann.fill("input[name=tool]", "refund_payment")
    ann.click("text=Review all matching…")
    expect(ann.locator("h1")).to_have_text("Force-resolve: all 16 matching this filter?")
    expect(ann.locator(".batch-sample li")).to_have_count(10)
    ann.fill("#batch-reason", "refunds re-issued by finance")
    ann.click("text=Force-resolve all 16")
    expect(ann).to_have_url(re.compile(r"/batch/\d+/$"))
    url = ann.url
    ann.screenshot(path=str(ARTIFACTS / "batch-job-running.png"))
    seen = _done_values(ann, 16, "finishing")
    assert ann.url == url  # no reload: the fragment was swapped in
    assert seen[-1] == 16 and len(seen) >= 3, seen  # it moved, more than once
    assert seen == sorted(seen), seen
    # Every request made, no outcome known: the bar counts outcomes, and it goes on polling.
    expect(ann.locator("#batch-bar")).to_have_attribute("value", "0")
    expect(ann.locator("[data-count=requested] strong")).to_have_text("16")
    expect(ann.locator("#batch-progress .batch-running")).to_have_text("16 still running")
    expect(ann.locator("#batch-progress")).to_have_attribute("hx-trigger", "every 1s")
    ann.reload()
    expect(ann.locator(".batch-item[data-outcome=requested]")).to_have_count(16)


def test_a_running_job_is_cancelled_from_its_page(site: str, ann: Any) -> None:
    from playwright.sync_api import expect

    ann.goto(site + "/batch/new/?action=leave&tool=ship_parcel")
    expect(ann.locator("h1")).to_have_text("Leave failed: all 30 matching this filter?")
    ann.fill("#batch-reason", "carrier gone, handled by hand")
    ann.click("text=Leave failed all 30")
    expect(ann.locator("#batch-progress [data-state=running]")).to_be_visible()
    ann.click("text=Cancel the job")
    _done_values(ann, 30, "cancelled")
    text = ann.locator("#batch-progress").inner_text()
    done = int(re.search(r"(\d+) of 30", text).group(1))  # type: ignore[union-attr]
    assert 0 < done < 30, text
    assert "cancelled by user:ann" in text
    ann.goto(ann.url.split("?")[0] + "?outcome=pending")
    expect(ann.locator(".batch-item[data-outcome=pending]")).to_have_count(30 - done)

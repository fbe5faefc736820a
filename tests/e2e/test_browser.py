"""In real headless Chromium (Debian's, driven by Playwright): log in, watch a saga made by
another process arrive live, open it, and find no console errors; screenshots are saved
under test-artifacts/."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.live import ROOT, Server, manage, temp_database

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("SAGABOARD_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))

MAKE_SAGA = (
    "from sagaboard.models import Project; from sagaboard.storage import DjangoStore; "
    "from undo_core import Saga, define_tool; "
    "s = Saga('<script>alert(1)</script>', saga_id='from-elsewhere', "
    "store=DjangoStore(Project.objects.get(slug='demo'))); "
    "s.execute(define_tool('reserve_stock', lambda i: 1, lambda o, i: None), {}); s.complete()"
)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Server, str]]:
    with temp_database("postgres" if PG else "sqlite", tmp_path) as url:
        manage(url, "migrate", "--no-input", "-v0")
        manage(url, "sagaboard_demo")
        with Server(url, debug=True) as server:
            yield server, url


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} missing: .ci/run installs Debian's chromium"
    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        yield chromium
        chromium.close()


def test_a_saga_from_another_process_appears_live_and_renders_as_text(
    site: tuple[Server, str], browser: Any
) -> None:
    server, url = site
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server.url}/login/")
    page.fill("input[name=username]", "demo")
    page.fill("input[name=password]", "demo")
    page.click("button[type=submit]")
    page.wait_for_selector("#saga-rows")
    page.wait_for_function("() => htmx && document.querySelector('[ws-connect]')")
    time.sleep(0.5)  # the socket opens after htmx processes the page

    env = {**os.environ, "DATABASE_URL": url}
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", MAKE_SAGA],
        cwd=ROOT, env=env, check=True, timeout=60, capture_output=True,
    )  # fmt: skip
    page.wait_for_selector("text=from-elsewhere", timeout=10_000)  # no reload
    assert page.locator("text=<script>alert(1)</script>").count() >= 1  # shown as text
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "saga-list.png"), full_page=True)

    page.click("#saga-rows tr:has-text('demo-refund-stuck') a")
    page.wait_for_selector("text=Event log")
    assert page.locator("text=ROLLBACK_FAILED").count() >= 1
    page.screenshot(path=str(ARTIFACTS / "saga-detail.png"), full_page=True)
    assert errors == []

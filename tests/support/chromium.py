"""Debian's headless Chromium for the browser tests (Playwright drives it; no download)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.live_server import ROOT

CHROMIUM = os.environ.get("SAGABOARD_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"


@contextmanager
def chromium(wait_ms: int) -> Iterator[Any]:
    """The browser, with ``wait_ms`` as the default bound of every expectation."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=wait_ms)
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} missing: .ci/run installs Debian's chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        yield browser
        browser.close()


@dataclass
class Tab:
    """A page of a logged-in user, with its console errors and any dialog it opened."""

    page: Any
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def mark(self) -> None:
        """Leave a mark in the page's window: a reload or navigation wipes it."""
        self.page.evaluate("window.__marker = 1")

    def assert_not_reloaded(self) -> None:
        assert self.page.evaluate("window.__marker") == 1, "the page was reloaded"

    def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.bring_to_front()  # a tab in the background paints slowly
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=True)

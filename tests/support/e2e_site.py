"""A browser test's world: a seeded throw-away database behind a real server, and a page
logged in to it that must log no console error.

``seeded_site`` uses PostgreSQL when ``DATABASE_URL`` names it (the suite's PostgreSQL run),
SQLite otherwise; ``script`` runs in ``manage.py shell`` with the demo's undos registered.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.chromium import chromium
from tests.support.live_server import Server, manage, temp_database

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


@contextmanager
def seeded_site(workdir: Path, script: str) -> Iterator[tuple[str, str]]:
    """(the server's URL, its database URL), the database migrated and ``script`` run."""
    with temp_database("postgres" if PG else "sqlite", workdir) as url:
        manage(url, "migrate", "--no-input", "-v0")
        manage(url, "shell", "-c", script)
        with Server(url, debug=False) as server:
            yield server.url, url


@contextmanager
def signed_in(
    base: str, username: str, password: str, *, wait_ms: int, init_script: str | None = None
) -> Iterator[Any]:
    """A fresh Chromium page logged in as ``username`` (``init_script`` runs before each
    document); on leaving, the page must have logged no console error or page error."""
    with chromium(wait_ms) as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        if init_script:
            context.add_init_script(init_script)
        page = context.new_page()
        page.set_default_timeout(wait_ms)
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(base + "/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_selector("#saga-rows")
        yield page
        assert errors == [], errors
        context.close()

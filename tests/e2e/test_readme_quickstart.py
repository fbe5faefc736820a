"""The agent quickstart (the README's, now docs/agents.md's), run exactly as pasted: saved as
agent.py in an empty folder (no ``var/``, no project files), run by a fresh Python with a live
sagaboard and a token of its project. The saga it reports must be on the server, completed,
with its two steps.

``quickstart_code`` is shared with the fresh-virtualenv check (``scripts/check_sdk_wheel.py``),
which runs the same block from a virtualenv holding only the undo-core wheel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.live_server import ROOT, Server, prepare, temp_database
from undo_core.remote import SagaboardClient

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


QUICKSTART_PAGE = ROOT / "docs" / "agents.md"


def quickstart_code(readme: Path = QUICKSTART_PAGE) -> str:
    """The python block right after the ``<!-- agent-quickstart -->`` marker."""
    found = re.search(r"<!-- agent-quickstart -->\n```python\n(.*?)\n```", readme.read_text(), re.S)
    assert found, f"{readme.relative_to(ROOT)} lost its <!-- agent-quickstart --> block"
    return found.group(1) + "\n"


def run_quickstart(python: str, folder: Path, url: str, token: str) -> str:
    """Run the quickstart with ``python`` in ``folder``; what it printed."""
    (folder / "agent.py").write_text(quickstart_code())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    done = subprocess.run(
        [python, "agent.py"], cwd=folder, capture_output=True, text=True, timeout=120,
        env={**env, "SAGABOARD_URL": url, "SAGABOARD_TOKEN": token},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def assert_on_server(url: str, token: str, printed: str) -> None:
    found = re.search(r"^saga (\S+) COMPLETED$", printed, re.M)
    assert found, printed
    with SagaboardClient(url, token) as client:
        saga = client.get_saga(found.group(1))
    assert saga["name"] == "storebot-return" and saga["status"] == "COMPLETED"
    assert [(s["tool_name"], s["state"]) for s in saga["steps"]] == [
        ("return_item", "COMPLETED"),
        ("refund_payment", "COMPLETED"),
    ]


def test_the_readme_quickstart_works_in_an_empty_folder(tmp_path: Path) -> None:
    folder = tmp_path / "fresh-agent"
    folder.mkdir()
    with temp_database("postgres" if PG else "sqlite", tmp_path) as db_url:
        token = prepare(db_url)
        with Server(db_url) as server:
            printed = run_quickstart(sys.executable, folder, server.url, token)
            assert_on_server(server.url, token, printed)
    assert (folder / "var" / "sagaboard.spool").is_file()  # made where it was pasted

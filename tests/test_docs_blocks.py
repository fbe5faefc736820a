"""Every code block of the README and the manual that the docs mark as runnable runs as
written (issue 33, item 5: a stale example is a bug).

The convention (docs/index.md, "Code blocks: what runs, and what is an example"):

* A ```` ```python ```` block, and a shell block (``sh``, ``bash``, ``shell``, ``console``), is
  runnable unless a marker says otherwise. Other languages (``json``, ``text``, ``mermaid``, no
  language) are not programs and are never run.
* A marker is an HTML comment on the line right before the fence:

  - ``<!-- example: <what it needs> -->``: shown, never run; the reason is required (Slack,
    SMTP, a reverse proxy, a model provider's key, a server the reader started, a fragment...);
  - ``<!-- continues -->``: appended to the page's block before it, run with it as one program;
  - ``<!-- live -->``: runs against a live sagaboard; only in docs/sdk.md, whose Python blocks
    ``tests/undo_core/test_sdk_docs.py`` runs (with the same markers), so they are not run twice;
  - ``<!-- agent-quickstart -->``: the agent quickstart, which
    ``tests/e2e/test_readme_quickstart.py`` runs in an empty folder against a live server;
  - ``<!-- tested-by: <test file> -->``: run by that test in its own way (the backups and restores
    of docs/operations.md on a throw-away PostgreSQL); the test must exist and name the page.

* A Python block runs with this interpreter in a fresh, empty temporary folder, in a subprocess
  of its own. A page's shell blocks run in order, each with ``bash -euo pipefail`` at the top of
  the checkout, against one throw-away SQLite database per page on which the demo is loaded
  (what ``make run`` leaves: its ``demo`` project, plus nothing else), with a ``var/`` of their
  own. Each must exit 0.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SDK_REFERENCE = ROOT / "docs" / "sdk.md"  # its Python blocks: tests/undo_core/test_sdk_docs.py
QUICKSTART = ROOT / "docs" / "agents.md"  # its quickstart: tests/e2e/test_readme_quickstart.py

PYTHON = {"python", "py"}
SHELL = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^([ \t]*)```([\w+-]*)[^\n]*\n(.*?)^\1```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"^[ \t]*<!-- (.*?) -->[ \t]*$")
PLAIN_MARKERS = {"continues", "live", "agent-quickstart"}


class Block(NamedTuple):
    page: Path
    line: int  # of the fence's first code line (the first block's, for a continued program)
    kind: str  # "python" or "shell"
    code: str
    marker: str | None  # the comment on the line before the fence, without <!-- -->

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The runnable-language blocks of ``page``, continued blocks joined to the one before."""
    text = page.read_text(encoding="utf-8")
    lines = text.split("\n")
    out: list[Block] = []
    for found in FENCE.finditer(text):
        indent, lang, code = found.group(1), found.group(2).lower(), found.group(3)
        kind = "python" if lang in PYTHON else "shell" if lang in SHELL else None
        if kind is None:
            continue
        fence_line = text.count("\n", 0, found.start())  # 0-based index of the fence
        before = MARKER.match(lines[fence_line - 1]) if fence_line else None
        marker = before.group(1).strip() if before else None
        code = "\n".join(line.removeprefix(indent) for line in code.split("\n"))
        block = Block(page, fence_line + 2, kind, code, marker)
        if marker == "continues":
            previous = [b for b in out if b.kind == kind]
            assert previous, f"{block.where}: <!-- continues --> with no {kind} block before it"
            first = previous[-1]
            out[out.index(first)] = first._replace(code=first.code + code)
            continue
        out.append(block)
    return out


BLOCKS = [b for page in PAGES for b in blocks(page)]


def runnable(block: Block) -> bool:
    return block.marker is None


def test_the_docs_have_runnable_blocks_of_both_kinds() -> None:
    """The parse sees the blocks (it must not quietly match nothing)."""
    python = [b for b in BLOCKS if runnable(b) and b.kind == "python" and b.page != SDK_REFERENCE]
    shell = [b for b in BLOCKS if runnable(b) and b.kind == "shell"]
    assert len(python) >= 4 and len(shell) >= 5, (len(python), len(shell))
    assert any(b.page.name == "engine.md" for b in python)
    assert {b.page.name for b in shell} >= {"api.md", "getting-started.md", "operations.md"}


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.marker], ids=lambda b: b.where)
def test_every_marker_is_one_the_convention_knows(block: Block) -> None:
    marker = block.marker or ""
    if marker.startswith("example:"):
        assert marker.removeprefix("example:").strip(), f"{block.where}: an example says why"
    elif marker.startswith("tested-by:"):
        test = ROOT / marker.removeprefix("tested-by:").strip()
        assert test.is_file(), f"{block.where}: {test} does not exist"
        page = str(block.page.relative_to(ROOT))
        assert page in test.read_text(), f"{block.where}: {test.name} does not name {page}"
    else:
        assert marker in PLAIN_MARKERS, (
            f"{block.where}: unknown marker <!-- {marker} --> (docs/index.md lists them)"
        )


def test_live_blocks_are_python_blocks_of_the_sdk_reference() -> None:
    """test_sdk_docs.py starts the server they need; nothing here does."""
    live = [b.where for b in BLOCKS if b.marker == "live" and b.page != SDK_REFERENCE]
    assert live == [], f"<!-- live --> outside docs/sdk.md, which nothing runs: {live}"
    assert all(b.kind == "python" for b in BLOCKS if b.marker == "live")


def test_the_sdk_reference_marks_no_python_block_as_an_example() -> None:
    """test_sdk_docs.py runs every python block of docs/sdk.md: a marked one would fail there."""
    marked = [
        b.where
        for b in BLOCKS
        if b.page == SDK_REFERENCE and b.kind == "python" and b.marker not in (None, "live")
    ]
    assert marked == []


def test_the_agent_quickstart_is_the_block_the_e2e_test_runs() -> None:
    from tests.e2e.test_readme_quickstart import quickstart_code

    quickstart = [b for b in BLOCKS if b.marker == "agent-quickstart"]
    assert [b.page for b in quickstart] == [QUICKSTART] and quickstart[0].kind == "python"
    assert quickstart_code(QUICKSTART) == quickstart[0].code


def _clean_env() -> dict[str, str]:
    drop = {"PYTHONPATH", "DATABASE_URL", "DJANGO_SETTINGS_MODULE", "SAGABOARD_URL"}
    drop.add("SAGABOARD_TOKEN")  # a shell block that needs one makes its own
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.mark.slow  # each block in a subprocess of its own
@pytest.mark.parametrize(
    "block",
    [b for b in BLOCKS if runnable(b) and b.kind == "python" and b.page != SDK_REFERENCE],
    ids=lambda b: b.where,
)
def test_the_python_block_runs(block: Block, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", block.code], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, env={**_clean_env(), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, (
        f"{block.where}: the block failed\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
    )


def _shell_env(database: Path, var: Path) -> dict[str, str]:
    env = _clean_env()
    return {
        **env,
        "DATABASE_URL": f"sqlite:///{database}",
        "SAGABOARD_VAR_DIR": str(var),
        "SAGABOARD_DEBUG": "1",  # as `make run`: the demo's undos registered
        "SAGABOARD_COMPENSATION_MODULES": "sagaboard.demo.compensations",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    }


@pytest.fixture(scope="module")
def demo_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A migrated SQLite database with the demo loaded, and the var/ folder it was made with."""
    folder = tmp_path_factory.mktemp("docs-shell")
    database, var = folder / "demo.sqlite3", folder / "var"
    env = _shell_env(database, var)
    for args in (["migrate", "--no-input", "-v0"], ["sagaboard_demo"]):
        subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
            capture_output=True, timeout=300,
        )  # fmt: skip
    yield database, var


SHELL_PAGES = sorted({b.page for b in BLOCKS if runnable(b) and b.kind == "shell"})


@pytest.mark.slow  # subprocesses, and a database migrated and loaded with the demo
@pytest.mark.parametrize("page", SHELL_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_shell_blocks_of_the_page_run(
    page: Path, demo_database: tuple[Path, Path], tmp_path: Path
) -> None:
    if not (ROOT / ".venv" / "bin" / "python").is_file():
        pytest.skip("the blocks call .venv/bin/python: run `make install` first")
    template, var = demo_database
    database = tmp_path / "page.sqlite3"
    source, copy = sqlite3.connect(template), sqlite3.connect(database)
    try:
        source.backup(copy)  # a fresh demo database for this page
    finally:
        source.close()
        copy.close()
    env = _shell_env(database, var)
    for block in [b for b in BLOCKS if b.page == page and runnable(b) and b.kind == "shell"]:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.code], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, (
            f"{block.where}: the block failed\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )

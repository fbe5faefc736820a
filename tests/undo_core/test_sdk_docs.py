"""docs/sdk.md, the agent developer's API reference, is kept true by running it.

The rules of the page, kept simple on purpose:

* Every fenced ```` ```python ```` block is a program. It runs with this interpreter in a
  fresh, empty temporary folder (its own subprocess: no namespace, tracer provider or
  working directory leaks from one block to the next), and must exit 0.
* A block preceded by ``<!-- continues -->`` (on the line right before its fence) is
  appended to the block before it and runs with it, as one program.
* A block preceded by ``<!-- live -->`` needs a live sagaboard: it runs in the ``slow`` test,
  against a server started here (``tests/support/live_server.py``), with ``SAGABOARD_URL``
  and ``SAGABOARD_TOKEN`` of a project in its environment. The others need no network.
* Every public name (``scripts/sdk_reference.py``'s ``MODULES``: ``undo_core``,
  ``undo_core.remote``, ``.testing``, ``.tracing``, the adapters, ``undo_core.mcp.server``)
  appears, as a word, in at least one python block.
* The generated parts (the reference table, the error tree, the undo-mcp options) match the code:
  ``scripts/sdk_reference.py --check``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "sdk.md"
SCRIPT = ROOT / "scripts" / "sdk_reference.py"
_FENCE = re.compile(r"(?:<!-- (continues|live) -->\n)?```python\n(.*?)\n```", re.S)


class Block(NamedTuple):
    line: int  # of the first block of the program in docs/sdk.md
    code: str
    live: bool


def programs(text: str) -> list[Block]:
    """The python blocks of ``text`` as programs (continued blocks joined to their first)."""
    out: list[Block] = []
    for found in _FENCE.finditer(text):
        marker, code = found.group(1), found.group(2) + "\n"
        line = text.count("\n", 0, found.start(2)) + 1
        if marker == "continues":
            assert out, f"docs/sdk.md:{line}: <!-- continues --> with no block before it"
            first = out.pop()
            out.append(first._replace(code=first.code + code))
        else:
            out.append(Block(line, code, marker == "live"))
    return out


PROGRAMS = programs(DOC.read_text(encoding="utf-8"))


def public_names() -> dict[str, list[str]]:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import sdk_reference
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return sdk_reference.public_names()


def run(block: Block, folder: Path, env: dict[str, str] | None = None) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "UNDO_MCP_DB")}
    done = subprocess.run(
        [sys.executable, "-c", block.code], cwd=folder, capture_output=True, text=True,
        timeout=120, env={**clean, "PYTHONPATH": str(ROOT), **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, (
        f"docs/sdk.md:{block.line}: the block failed\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
    )


def test_every_public_name_appears_in_a_runnable_block() -> None:
    code = "\n".join(b.code for b in PROGRAMS)
    words = set(re.findall(r"\b\w+\b", code))
    missing = [
        f"{module}.{name}"
        for module, names in public_names().items()
        for name in names
        if name not in words
    ]
    assert not missing, f"docs/sdk.md has no python block using: {', '.join(missing)}"


@pytest.mark.slow  # a subprocess
def test_the_generated_reference_and_error_tree_match_the_code() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_the_error_tree_lists_every_exported_error() -> None:
    """The tree is generated, but a class it missed (a new base) must still fail here."""
    text = DOC.read_text(encoding="utf-8")
    tree = text.split("<!-- generated:error-tree -->")[1].split("<!-- /generated:error-tree -->")[0]
    import undo_core
    import undo_core.remote

    for module in (undo_core, undo_core.remote):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, BaseException):
                assert re.search(rf"\b{name}\b", tree), f"{name} is not in the error tree"
                assert issubclass(obj, undo_core.UndoCoreError), name


@pytest.mark.slow  # each block in a subprocess of its own
@pytest.mark.parametrize(
    "block", [b for b in PROGRAMS if not b.live], ids=lambda b: f"line{b.line}"
)
def test_the_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    run(block, tmp_path)


@pytest.mark.slow
def test_the_live_blocks_run_against_a_sagaboard(tmp_path: Path) -> None:
    from tests.support.live_server import Server, prepare, temp_database

    live = [b for b in PROGRAMS if b.live]
    assert live, "docs/sdk.md has no <!-- live --> block"
    pg = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
    with temp_database("postgres" if pg else "sqlite", tmp_path) as db_url:
        token = prepare(db_url)
        with Server(db_url) as server:
            for i, block in enumerate(live):
                folder = tmp_path / f"block-{i}"
                folder.mkdir()
                run(block, folder, {"SAGABOARD_URL": server.url, "SAGABOARD_TOKEN": token})


def _slugs(markdown: str) -> set[str]:
    """GitHub's anchors of the headings of ``markdown`` (lowercase, punctuation dropped)."""
    slugs = set()
    for heading in re.findall(r"^#{1,6} (.+)$", markdown, re.M):
        text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
        slugs.add(text.replace(" ", "-"))
    return slugs


def test_the_links_to_sections_lead_somewhere() -> None:
    """Its own sections, and those of the manual's other pages (the engine, the agents' page,
    ...: the README's sections moved there) that it links to."""
    text = DOC.read_text(encoding="utf-8")
    own = _slugs(text)
    broken = [f"#{a}" for a in re.findall(r"\]\(#([\w-]+)\)", text) if a not in own]
    for page, anchor in re.findall(r"\]\(([\w/.-]+\.md)#([\w-]+)\)", text):
        target = DOC.parent / page
        if not target.is_file() or anchor not in _slugs(target.read_text(encoding="utf-8")):
            broken.append(f"{page}#{anchor}")
    assert not broken, f"docs/sdk.md links to missing sections: {broken}"

"""docs/architecture.md cannot go stale: its map names every package, and only what exists.

The map is the tree after the ``<!-- map: ... -->`` marker: two spaces of indent per level, a
name ending in ``/`` is a folder, descriptions start at column 22. Every folder and file it
names must exist, every package of ``sagaboard/`` and ``undo_core/`` must be in it, and every
Python file the page names elsewhere (the tables, the event's path, the diagrams) must exist.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
DESCRIPTION_COLUMN = 22
PACKAGE_ROOTS = ("sagaboard", "undo_core")


def _map_lines() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    after = text.split("<!-- map:", 1)[1]
    block = after.split("```", 2)[1]  # the fenced block that follows the marker
    return block.splitlines()[1:]


def _named() -> list[tuple[str, str]]:
    """(path, description) of each entry of the map, its path built from the indentation."""
    parents: list[str] = []
    entries = []
    for line in _map_lines():
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if not stripped or indent >= DESCRIPTION_COLUMN:
            continue  # a blank line or a description's continuation
        level = indent // 2
        token = stripped.split()[0].rstrip(",")
        parents = parents[:level]
        path = "".join(parents) + token
        if token.endswith("/"):
            parents.append(token)
        entries.append((path, stripped[len(token) :]))
    return entries


def _packages() -> set[str]:
    found = set()
    for root in PACKAGE_ROOTS:
        for init in (ROOT / root).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(init.parent.relative_to(ROOT).as_posix() + "/")
    return found


def test_every_folder_and_file_the_map_names_exists() -> None:
    missing = [
        path
        for path, description in _named()
        if "git-ignored" not in description and not (ROOT / path).exists()
    ]
    assert missing == []


def test_every_package_of_sagaboard_and_undo_core_is_in_the_map() -> None:
    named = {path for path, _ in _named()}
    assert sorted(_packages() - named) == []
    # The map really is read: it names the feature folders and the engine's rooms.
    assert {"sagaboard/actions/services/", "undo_core/engine/"} <= named


def test_every_python_file_the_page_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8").split("<!-- map:", 1)[0]
    names = set(re.findall(r"[\w./-]*\w\.py\b", text)) - {"_name.py"}
    everywhere = {
        p.relative_to(ROOT).as_posix() for r in PACKAGE_ROOTS for p in (ROOT / r).rglob("*.py")
    }
    missing = []
    for name in sorted(names):
        candidates = [name, f"sagaboard/{name}", f"undo_core/{name}"]
        if any((ROOT / c).is_file() for c in candidates):
            continue
        if any(p.endswith(f"/{name}") for p in everywhere):
            continue  # a name the table gives inside its feature's row (``api/v1.py``)
        missing.append(name)
    assert missing == []
    assert len(names) > 30  # the tables and the event's path name the files they mean


def test_no_folder_holds_more_than_15_modules_or_3000_lines() -> None:
    """Issue 33's bound on a room: a folder past it is cut by capability (migrations aside)."""
    too_big = []
    for package in sorted(_packages()):
        if package.endswith("migrations/"):
            continue  # history: where Django wants it, never moved
        modules = list((ROOT / package).glob("*.py"))
        lines = sum(len(m.read_text(encoding="utf-8").splitlines()) for m in modules)
        if len(modules) > 15 or lines > 3000:
            too_big.append((package, len(modules), lines))
    assert too_big == []

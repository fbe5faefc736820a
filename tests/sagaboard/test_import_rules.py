"""sagaboard uses undo_core's public API: no private name imported from it.

import-linter (`make lint`, docs/architecture.md) sees modules: it keeps private
modules (``undo_core.remote._wire``) private. It does not see names, so this test
reads every module of sagaboard for ``from undo_core... import _name``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sagaboard

SAGABOARD = Path(sagaboard.__file__).parent


def private_names_from_undo_core(source: str) -> list[str]:
    """``module.name`` for each underscore name a module imports from undo_core."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "undo_core":
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return found


def test_the_check_finds_a_private_name_imported_from_undo_core() -> None:
    source = "from undo_core.engine import _build\nfrom undo_core import Saga\n"
    assert private_names_from_undo_core(source) == ["undo_core.engine._build"]


def test_sagaboard_imports_no_private_name_from_undo_core() -> None:
    modules = sorted(SAGABOARD.rglob("*.py"))
    assert len(modules) > 50  # the whole package was read
    found = {
        str(path.relative_to(SAGABOARD)): names
        for path in modules
        if (names := private_names_from_undo_core(path.read_text()))
    }
    assert found == {}

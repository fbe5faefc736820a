"""The engine's examples (the README's undo_core section, now docs/engine.md) run as written
(a stale example is a bug)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ENGINE_PAGE = Path(__file__).resolve().parents[2] / "docs" / "engine.md"


def examples() -> list[str]:
    text = ENGINE_PAGE.read_text()
    section = text.split("# undo_core: the saga engine\n", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return [b for b in blocks if "..." not in b]  # fragments with elisions are not programs


@pytest.mark.parametrize("code", examples(), ids=lambda code: code.splitlines()[0][:40])
def test_readme_example_runs(code: str) -> None:
    exec(compile(code, str(ENGINE_PAGE), "exec"), {})


def test_the_readme_has_runnable_examples() -> None:
    assert len(examples()) >= 3

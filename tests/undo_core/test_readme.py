"""The README's undo_core examples run as written (a stale example is a bug)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def examples() -> list[str]:
    text = README.read_text()
    section = text.split("## undo_core: the saga engine", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return [b for b in blocks if "..." not in b]  # fragments with elisions are not programs


@pytest.mark.parametrize("code", examples(), ids=lambda code: code.splitlines()[0][:40])
def test_readme_example_runs(code: str) -> None:
    exec(compile(code, str(README), "exec"), {})


def test_the_readme_has_runnable_examples() -> None:
    assert len(examples()) >= 3

"""The two distributions built from this repository agree: one version, one tree of code.

(``make check-dist`` builds them and checks the undo-core wheel in a fresh virtualenv.)
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import undo_core

ROOT = Path(__file__).resolve().parents[1]


def project(path: Path) -> dict[str, object]:
    return tomllib.loads(path.read_text())["project"]


def test_sagaboard_pins_the_undo_core_of_its_own_version() -> None:
    sagaboard = project(ROOT / "pyproject.toml")
    pins = [d for d in sagaboard["dependencies"] if re.match(r"undo-core\b", d)]  # type: ignore[attr-defined]
    assert pins == [f"undo-core=={undo_core.__version__}"]


def test_both_take_their_version_from_undo_core() -> None:
    for path in (ROOT / "pyproject.toml", ROOT / "packaging" / "undo-core" / "pyproject.toml"):
        config = tomllib.loads(path.read_text())
        assert config["project"]["dynamic"] == ["version"], path
        assert config["tool"]["setuptools"]["dynamic"]["version"] == {
            "attr": "undo_core.__version__"
        }, path


def test_the_changelog_has_the_current_version() -> None:
    assert f"## {undo_core.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_undo_core_is_built_from_the_one_tree_and_needs_only_httpx() -> None:
    assert (ROOT / "packaging" / "undo-core" / "undo_core").resolve() == ROOT / "undo_core"
    config = project(ROOT / "packaging" / "undo-core" / "pyproject.toml")
    assert config["dependencies"] == ["httpx>=0.27"]
    assert set(config["optional-dependencies"]) == {  # type: ignore[arg-type]
        "mcp", "pydantic-ai", "openai-agents", "langchain", "otel"
    }  # fmt: skip


def test_the_templates_and_static_files_ship_inside_the_sagaboard_package() -> None:
    assert (ROOT / "sagaboard" / "templates").resolve() == ROOT / "templates"
    assert (ROOT / "sagaboard" / "static").resolve() == ROOT / "static"

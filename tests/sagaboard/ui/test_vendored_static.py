"""Front-end libraries are vendored (no CDN) and match the versions recorded for them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

VENDOR = Path(__file__).resolve().parents[3] / "static" / "vendor"


def test_vendored_files_match_their_recorded_sums() -> None:
    manifest = json.loads((VENDOR / "VERSIONS.json").read_text())
    assert {"htmx.min.js", "htmx-ext-ws.js"} <= set(manifest)
    for name, entry in manifest.items():
        digest = hashlib.sha256((VENDOR / name).read_bytes()).hexdigest()
        assert digest == entry["sha256"], (
            f"{name} differs from {entry['package']} {entry['version']}"
        )
    assert manifest["htmx.min.js"]["version"].startswith("2.")


def test_no_template_loads_a_script_from_another_host() -> None:
    templates = Path(__file__).resolve().parents[3] / "templates"
    for page in templates.rglob("*.html"):
        text = page.read_text()
        assert 'src="http' not in text and 'src="//' not in text, page


def test_axe_core_is_vendored_with_its_licence_for_the_tests_only() -> None:
    """axe-core runs in the accessibility test (tests/e2e/test_accessibility_browser.py);
    no page may load it."""
    manifest = json.loads((VENDOR / "VERSIONS.json").read_text())
    assert manifest["axe.min.js"]["package"] == "axe-core"
    assert "Mozilla Public License" in (VENDOR / "axe-core.LICENSE").read_text()
    templates = Path(__file__).resolve().parents[3] / "templates"
    for page in templates.rglob("*.html"):
        assert "axe.min.js" not in page.read_text(), f"{page} loads axe-core"

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

"""Take the screenshots of a batch job's page (docs/operator/batch-jobs.md), light and dark.

The demo (as scripts/screenshots.py starts it) plus 40 failed undos of refund_payment and a
finished "leave failed" batch over them, three of them refused (a colleague's retry came
first: ``tests.support.batch_world.screenshot_batch``); saved as
docs/screenshots/batch-job-light.png and -dark.png. scripts/screenshots.py takes them too
(after its other pictures, on a demo of their own: the 40 failures would crowd the others).

    .venv/bin/python scripts/batch_screenshot.py
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.chromium import chromium  # noqa: E402
from tests.support.demo_site import BATCH, EXTRAS, log_in  # noqa: E402
from tests.support.live_server import Server, load_demo, manage, temp_database  # noqa: E402

SEED = "from tests.support.batch_world import screenshot_batch; print(screenshot_batch())"


def shoot(
    out: Path,
    themes: Sequence[str] = ("light", "dark"),
    width: int = 1280,
    height: int = 860,
) -> list[Path]:
    """batch-job-<theme>.png in ``out`` for each theme; the files written."""
    from scripts.screenshots import ready

    written = []
    with tempfile.TemporaryDirectory() as work, temp_database("sqlite", Path(work)) as url:
        load_demo(url)
        manage(url, "shell", "-v", "0", "-c", EXTRAS)
        manage(url, "shell", "-v", "0", "-c", BATCH)
        job = manage(url, "shell", "-v", "0", "-c", SEED).splitlines()[-1].strip()
        with Server(url, debug=True) as server, chromium(10_000) as browser:
            state = log_in(browser, server.url)
            for theme in themes:
                context = browser.new_context(
                    viewport={"width": width, "height": height}, color_scheme=theme,
                    storage_state=state, device_scale_factor=1,
                )  # fmt: skip
                page = context.new_page()
                ready(page, f"{server.url}/batch/{job}/?outcome=")
                path = out / f"batch-job-{theme}.png"
                page.screenshot(path=str(path), animations="disabled")
                written.append(path)
                context.close()
    return written


def main() -> int:
    for path in shoot(ROOT / "docs" / "screenshots"):
        print(f"{path.relative_to(ROOT)}  {path.stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

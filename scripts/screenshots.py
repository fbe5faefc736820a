"""Retake the README screenshots, in the light and the dark theme.

Starts the demo on a throw-away SQLite database and a live server (as the browser tests do:
tests/support/demo_site.py), logs in as demo/demo in Debian's headless Chromium, and saves
<page>-light.png and <page>-dark.png for the overview, the saga list, a saga whose rollback
failed, the approval queue, the needs-attention page, the inbox and the keyboard
shortcuts dialog into docs/screenshots/.

    .venv/bin/python scripts/screenshots.py            # all of them
    .venv/bin/python scripts/screenshots.py --only overview,saga-list --theme dark

Each image is the top of the page at the given window size (not the whole scroll height), so
the files stay small (~100-250 KB) and comparable from one take to the next.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.chromium import chromium  # noqa: E402
from tests.support.demo_site import PAGES, demo_site, log_in  # noqa: E402

SHOTS = {
    "overview": PAGES["overview"],
    "saga-list": PAGES["saga-list"],
    "saga-rollback-failed": PAGES["saga-rollback-failed"],
    "approval-queue": PAGES["approval-queue"],
    "needs-attention": PAGES["needs-attention"],
    "inbox": PAGES["inbox"],
    "keyboard-help": PAGES["saga-list"] + "#keys",  # the "?" dialog, opened on the list
}
THEMES = ("light", "dark")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/screenshots.py",
        description="Retake the README screenshots (light and dark) from the demo.",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "screenshots",
        help="folder for the PNGs (default: docs/screenshots/)",
    )  # fmt: skip
    parser.add_argument(
        "--only", default="", help=f"comma-separated pages (default: all of {', '.join(SHOTS)})"
    )
    parser.add_argument("--theme", choices=(*THEMES, "both"), default="both")
    parser.add_argument("--width", type=int, default=1280, help="window width in px (1280)")
    parser.add_argument("--height", type=int, default=860, help="window height in px (860)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(SHOTS)
    unknown = sorted(set(names) - set(SHOTS))
    if unknown:
        parser.error(f"--only: unknown page(s) {', '.join(unknown)}; pages: {', '.join(SHOTS)}")
    args.names = names
    args.themes = THEMES if args.theme == "both" else (args.theme,)
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory() as work,
        demo_site("sqlite", Path(work)) as server,
        chromium(10_000) as browser,
    ):
        state = log_in(browser, server.url)
        for theme in args.themes:
            context = browser.new_context(
                viewport={"width": args.width, "height": args.height},
                color_scheme=theme, storage_state=state, device_scale_factor=1,
            )  # fmt: skip
            page = context.new_page()
            for name in args.names:
                path = args.out / f"{name}-{theme}.png"
                _shoot(page, server.url + SHOTS[name], path)
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                print(f"{shown}  {path.stat().st_size // 1024} KB")
            context.close()
    return 0


def _shoot(page: Any, url: str, path: Path) -> None:
    page.goto(url.removesuffix("#keys"))
    page.wait_for_load_state("load")
    page.evaluate("document.fonts.ready")
    page.wait_for_timeout(300)  # the live feed's first message, if any
    if url.endswith("#keys"):
        page.keyboard.press("?")
        page.wait_for_selector("#keys-help[open]")
    page.screenshot(path=str(path), animations="disabled")


if __name__ == "__main__":
    sys.exit(main())

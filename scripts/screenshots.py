"""Retake every screenshot of the README and the manual (docs/screenshots/), light and dark.

Starts the demo on a throw-away SQLite database and a live server (as the browser tests do:
tests/support/demo_site.py), adds what some pictures need (demo owns demo-refund-stuck;
olga owns demo-return-failing and wrote a note on it, edited once; a checkout the demo agent
runs, with olga's request to stop it), logs in as demo/demo in Debian's headless Chromium,
and saves <page>-light.png and <page>-dark.png into docs/screenshots/: the overview, the
saga list, a saga whose rollback failed, the approval queue, needs attention, the inbox, the
keyboard shortcuts dialog, the confirm page of a mailed decision link, a saga's owner and
notes, a running saga with a rollback requested, and (on a second demo with 40 more failed
undos: scripts/batch_screenshot.py) a finished batch job. docs/screenshots/before/ is
history: left as it is.

    .venv/bin/python scripts/screenshots.py            # all of them
    .venv/bin/python scripts/screenshots.py --only overview,saga-list --theme dark

Each image is the top of the page at the given window size (not the whole scroll height), or
one part of it (the notes, the saga's head), so the files stay small (~50-250 KB) and
comparable from one take to the next. A page that does not answer 200, or whose header lacks
the navigation or never says "Live", stops the script: no error page is ever saved.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.chromium import chromium  # noqa: E402
from tests.support.demo_site import BATCH, EXTRAS, MINT_LINK, PAGES, log_in  # noqa: E402
from tests.support.live_server import Server, load_demo, manage, temp_database  # noqa: E402

AGENT_SAGA = "agent-checkout-5e1f2a"

# Run in `manage.py shell` on the demo before the server starts (the demo's people exist).
SCENES = f"""
from django.contrib.auth import get_user_model
from sagaboard.demo.agent import SAGA_NAME, Shop, checkout_tools
from sagaboard.api.event_schema import EventBatchIn
from sagaboard.record.services.ingest import events_ingest
from sagaboard.collab.services.notes import note_add, note_edit
from sagaboard.collab.services.ownership import saga_assign
from sagaboard.actions.services.saga_stop import rollback_request
from sagaboard.models import Project, Saga, Step
from tests.support.agent_runs import Recorder
from undo_core import Saga as AgentSaga

project = Project.objects.get(slug="demo")
olga = get_user_model().objects.get(username="olga")
demo = get_user_model().objects.get(username="demo")

# demo, whose pages these are, owns the refund Stripe would not reverse (its inbox shows it).
stuck = Saga.objects.get(project=project, saga_id="demo-refund-stuck")
saga_assign(user=demo, saga_pk=stuck.pk, assignee="demo")

# Owner and notes: olga takes the return whose undo keeps failing and writes about it.
failing = Saga.objects.get(project=project, saga_id="demo-return-failing")
step = Step.objects.filter(saga=failing, state="ROLLBACK_FAILED").order_by("position").first()
saga_assign(user=olga, saga_pk=failing.pk, assignee="olga")
note = note_add(
    user=olga, saga_pk=failing.pk, step_id=step.step_id,
    body="Warehouse API **down** since 10:00 (status page: incident 4312); do not retry yet.",
)
note_edit(
    user=olga, note_pk=note.pk,
    body="Warehouse API back at 10:40. Retrying the `return_item` undo: *one* retry only.",
)

# The demo agent's checkout, two steps done and running, and olga's request to stop it.
store = Recorder()
saga = AgentSaga(SAGA_NAME, saga_id={AGENT_SAGA!r}, store=store)
reserve, charge = checkout_tools(Shop(), lambda text: None)[:2]
saga.start()
saga.execute(reserve, {{"sku": "sku-mug", "qty": 2}})
saga.execute(charge, {{"customerId": "cus_7", "amount": 1507}})
events_ingest(project=project, events=EventBatchIn.model_validate({{"events": store.sent}}).events)
running = Saga.objects.get(project=project, saga_id={AGENT_SAGA!r})
rollback_request(user=olga, saga_pk=running.pk, reason="Charged the wrong customer (cus_7)")
"""


@dataclass(frozen=True)
class Shot:
    """A picture: a page's address (a key of PAGES when it starts without "/"), and what to
    do before taking it: open the keyboard dialog, click a selector, or keep only one
    element or the top ``clip_height`` pixels."""

    page: str
    keys: bool = False
    click: str = ""
    element: str = ""
    clip_height: int = 0


SHOTS = {
    "overview": Shot("/overview/"),
    "saga-list": Shot("/"),
    "saga-rollback-failed": Shot("/sagas/demo/demo-refund-stuck/"),
    "approval-queue": Shot("/approvals/"),
    "needs-attention": Shot("/attention/"),
    "inbox": Shot("/inbox/"),
    "keyboard-help": Shot("/", keys=True),  # the "?" dialog, opened on the list
    "decide-link": Shot("decide-link"),  # minted when the demo starts
    "saga-notes": Shot(  # the edited note's history unfolded
        "/sagas/demo/demo-return-failing/",
        click="#notes li.note summary:has-text('History')",
        element="#notes",
    ),
    "saga-stop-requested": Shot(f"/sagas/demo/{AGENT_SAGA}/", clip_height=420),
}
BATCH_SHOT = "batch-job"  # its own demo: scripts/batch_screenshot.py
NAMES = (*SHOTS, BATCH_SHOT)
THEMES = ("light", "dark")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/screenshots.py",
        description="Retake the screenshots of the README and the manual, light and dark.",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "screenshots",
        help="folder for the PNGs (default: docs/screenshots/)",
    )  # fmt: skip
    parser.add_argument(
        "--only", default="", help=f"comma-separated pages (default: all of {', '.join(NAMES)})"
    )
    parser.add_argument("--theme", choices=(*THEMES, "both"), default="both")
    parser.add_argument("--width", type=int, default=1280, help="window width in px (1280)")
    parser.add_argument("--height", type=int, default=860, help="window height in px (860)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(NAMES)
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        parser.error(f"--only: unknown page(s) {', '.join(unknown)}; pages: {', '.join(NAMES)}")
    args.names = names
    args.themes = THEMES if args.theme == "both" else (args.theme,)
    return args


@contextmanager
def demo_with_scenes(workdir: Path) -> Iterator[Server]:
    """tests/support/demo_site.py's demo, plus SCENES, behind a live server."""
    with temp_database("sqlite", workdir) as url:
        load_demo(url)
        manage(url, "shell", "-v", "0", "-c", EXTRAS)
        manage(url, "shell", "-v", "0", "-c", BATCH)
        manage(url, "sagaboard_token", "create", "demo", "--label", "storebot in production")
        PAGES["decide-link"] = manage(url, "shell", "-v", "0", "-c", MINT_LINK)
        manage(url, "shell", "-v", "0", "-c", SCENES)
        with Server(url, debug=True) as server:
            yield server


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.names if n in SHOTS]
    if names:
        with (
            tempfile.TemporaryDirectory() as work,
            demo_with_scenes(Path(work)) as server,
            chromium(10_000) as browser,
        ):
            state = log_in(browser, server.url)
            for theme in args.themes:
                context = browser.new_context(
                    viewport={"width": args.width, "height": args.height},
                    color_scheme=theme, storage_state=state, device_scale_factor=1,
                )  # fmt: skip
                page = context.new_page()
                for name in names:
                    path = args.out / f"{name}-{theme}.png"
                    _shoot(page, server.url, SHOTS[name], path, args.width)
                    _report(path)
                context.close()
    if BATCH_SHOT in args.names:
        from scripts.batch_screenshot import shoot as shoot_batch

        for path in shoot_batch(args.out, args.themes, args.width, args.height):
            _report(path)
    return 0


def _report(path: Path) -> None:
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"{shown}  {path.stat().st_size // 1024} KB")


def _shoot(page: Any, base: str, shot: Shot, path: Path, width: int) -> None:
    address = shot.page if shot.page.startswith("/") else PAGES[shot.page]
    ready(page, base + address)
    if shot.keys:
        page.keyboard.press("?")
        page.wait_for_selector("#keys-help[open]")
    if shot.click:
        page.locator(shot.click).first.click()
    if shot.element:
        page.locator(shot.element).screenshot(path=str(path), animations="disabled")
    elif shot.clip_height:
        clip = {"x": 0, "y": 0, "width": width, "height": shot.clip_height}
        page.screenshot(path=str(path), clip=clip, animations="disabled")
    else:
        page.screenshot(path=str(path), animations="disabled")


def ready(page: Any, url: str) -> None:
    """Open ``url`` and wait until it shows the dashboard as a person sees it: answered 200,
    the header's navigation (with the Inbox) drawn, the badges read and the live feed open
    ("● Live"). Anything else is an error, never a screenshot."""
    response = page.goto(url)
    if response is None or response.status != 200:
        raise SystemExit(f"{url}: answered {response and response.status}, not 200")
    page.wait_for_load_state("load")
    if page.locator("header.top nav a[href='/inbox/']").count() != 1:
        raise SystemExit(f"{url}: no Inbox in the header's navigation (not logged in?)")
    page.wait_for_selector("#live-state[data-state='live']", timeout=10_000)
    page.wait_for_function("document.getElementById('nav-badges').children.length > 0")
    page.evaluate("document.fonts.ready")
    page.wait_for_timeout(300)  # the live feed's first message, if any


if __name__ == "__main__":
    sys.exit(main())

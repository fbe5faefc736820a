"""The saga page at 1,000 steps (the limit): how long the server takes to build it, and how
much of that is the timeline. ``python -m benchmarks.timeline_page [--steps N] [--runs R]``.

Runs against a throw-away SQLite database (or ``DATABASE_URL``) with a saga written straight
into the tables (``tests.support.timeline_sagas.big_saga``), in this process: it prints the
median of ``--runs`` renders of the whole page, of the timeline's geometry
(``sagaboard.sagas.pages.timeline.for_saga``) and of the timeline partial alone, and the
page's size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def _median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-timeline-"))
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{workdir / 'db.sqlite3'}")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sagaboard.config.settings")
    os.environ.setdefault("SAGABOARD_ALLOWED_HOSTS", "testserver")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.template.loader import render_to_string
    from django.test import Client
    from django.utils import timezone

    from sagaboard.access.reads import visible
    from sagaboard.models import Project
    from sagaboard.sagas.pages import presenters, timeline
    from tests.support.timeline_sagas import big_saga

    call_command("migrate", verbosity=0)
    shop = Project.objects.create(slug="bench", name="Bench")
    big_saga(shop, "big-1", args.steps)
    root = get_user_model().objects.create_superuser("bench", password="pw-bench-123456")
    client = Client()
    client.force_login(root)

    def page() -> bytes:
        answer = client.get("/sagas/bench/big-1/")
        assert answer.status_code == 200, answer.status_code
        return answer.content

    saga = visible.saga_get_for_project(project=shop, saga_id="big-1")
    assert saga is not None
    context = presenters.saga_page(saga, events=[], last_log_id=0)
    steps = context["timeline"]

    def geometry() -> object:
        return timeline.for_saga(saga, steps, timezone.now())

    def partial() -> str:
        return render_to_string("sagaboard/saga_detail.html#saga-timeline", context)

    size = len(page())
    print(f"saga page, {args.steps} steps ({size / 1024:.0f} KiB):")
    print(f"  whole page (queries, geometry, template) {_median_ms(page, args.runs):8.1f} ms")
    print(f"  timeline geometry (for_saga)             {_median_ms(geometry, args.runs):8.1f} ms")
    print(f"  timeline partial (template)              {_median_ms(partial, args.runs):8.1f} ms")
    print(f"  timeline SVG size {len(partial()) / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

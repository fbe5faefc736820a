"""Per-tool health and export at size: ``python -m benchmarks.tool_health [--quick] [--db sqlite]``.

Fills a throw-away database like ``benchmarks.pages`` (its ``Filler``: sagas of four steps
over eight tools, the newest from the last hours) to 1,000,000 stored steps
(``--quick``: 20,000, SQLite only), then measures:

* **the rollup fold**: the first fold over every stored saga (once: it is a one-off), and
  an incremental fold after 2,000 sagas changed (each run), in steps folded per second;
* **the pages**, as a logged-in user gets them (Django's test ``Client``, DEBUG off): the
  table of all tools and one tool's page, over the last week (the most rollup rows),
  with their SQL query counts; the floor is ``benchmarks.pages``'s minimal page;
* **the export**: every stored saga as CSV (``/sagas/export.csv``), streamed, in rows per
  second, and the peak of Python memory allocated while streaming it (``tracemalloc``,
  one run): flat with size, since the rows are read in keyset chunks.
"""

from __future__ import annotations

import os
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.pages import STEPS_PER_SAGA, Filler, _logged_in_client, _sample
from tests.support.live_server import manage, temp_database

FULL_STEPS = 1_000_000
QUICK_STEPS = 20_000
TOUCHED = 2_000
FLOOR_LABEL = "minimal page: login, one indexed query, tiny template"
PAGE_AIM = report.Aim("tools page < 50 ms at 1M steps", "value", "<=", 50.0)


def main(argv: list[str] | None = None) -> None:
    parser = report.cli((__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--db",
        choices=["sqlite", "postgres"],
        action="append",
        help="database (repeatable); default both, SQLite only with --quick",
    )
    parser.add_argument("--steps", type=int, default=0, help="stored steps (default 1M)")
    parser.add_argument("--requests", type=int, default=0, help="requests per sample")
    args = parser.parse_args(argv)
    figures = report.per_database(
        "benchmarks.tool_health", args, argv, measure_database, timeout=1500
    )
    report.emit(figures, args.json)


def measure_database(kind: str, args: Any) -> list[report.Figure]:
    size = args.steps or (QUICK_STEPS if args.quick else FULL_STEPS)
    per_sample = args.requests or (10 if args.quick else 15)
    with tempfile.TemporaryDirectory() as tmp, temp_database(kind, Path(tmp)) as url:
        manage(url, "migrate", "--no-input", "-v0", settings="benchmarks.settings")
        os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="benchmarks.settings",
                          SAGABOARD_DEBUG="0", SAGABOARD_LOG_FORMAT="text")  # fmt: skip
        os.environ.setdefault("SAGABOARD_SECRET_KEY", "bench-only-not-secret-0123456789abcdef")
        import django

        django.setup()
        return _measure(kind, size, args.runs, per_sample)


def _db(kind: str) -> str:
    return {"sqlite": "SQLite", "postgres": "PostgreSQL"}[kind]


def _measure(kind: str, size: int, runs: int, per_sample: int) -> list[report.Figure]:
    from django.conf import settings

    from sagaboard.health.services.tool_rollup import rollup_fold

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    fill = Filler()
    client = _logged_in_client(fill.project)
    began = time.monotonic()
    fill.grow_to(size // STEPS_PER_SAGA, deadline=began + 600)
    stored = fill.sagas * STEPS_PER_SAGA
    print(f"{kind}: {stored:,} steps stored in {time.monotonic() - began:.0f} s", flush=True)
    first = rollup_fold()
    first_rate = first.steps / first.seconds
    print(f"{kind}: first fold {first.steps:,} steps in {first.seconds:.1f} s", flush=True)
    incremental = [_incremental_fold(fill) for _ in range(runs)]
    urls = {"tools": "/tools/?window=week", "tool": "/tools/charge_card/?window=week"}
    floor_url = f"/bench/page-floor?saga={fill.detail_saga_id}"
    queries = {name: _queries(client, url) for name, url in urls.items()}
    floors: list[float] = []
    pages: dict[str, list[float]] = {name: [] for name in urls}
    for _ in range(runs):
        medians = _sample({"floor": floor_url, **urls}, client, per_sample)
        floors.append(medians["floor"])
        for name in urls:
            pages[name].append(medians[name])
    rates = [_export_rate(client, fill.sagas) for _ in range(runs)]
    peak = _export_peak(client, fill.sagas)
    key, note = f"{kind}.{_size(stored)}", f"{stored:,} steps in {fill.sagas:,} sagas"
    group, db = "Per-tool health and export", _db(kind)
    return [
        report.Figure(f"tool_health.{key}.tools_page", group,
                      f"{db}: tools table (week), {_size(stored)} steps", "ms", pages["tools"],
                      floor_label=FLOOR_LABEL, floor_samples=list(floors),
                      aim=PAGE_AIM if stored >= FULL_STEPS else None,
                      queries=queries["tools"], note=note),
        report.Figure(f"tool_health.{key}.tool_page", group,
                      f"{db}: one tool's page (week), {_size(stored)} steps", "ms", pages["tool"],
                      floor_label=FLOOR_LABEL, floor_samples=list(floors),
                      queries=queries["tool"], note=note),
        report.Figure(f"tool_health.{key}.fold_first", group,
                      f"{db}: first rollup fold, steps/s", "steps/s", [first_rate],
                      better="higher", note=f"{first.steps:,} steps in {first.seconds:.1f} s"),
        report.Figure(f"tool_health.{key}.fold_incremental", group,
                      f"{db}: incremental fold ({TOUCHED:,} sagas changed), steps/s",
                      "steps/s", incremental, better="higher", note=note),
        report.Figure(f"tool_health.{key}.export_rate", group,
                      f"{db}: CSV export, every saga, rows/s", "rows/s", rates,
                      better="higher", note=f"{fill.sagas:,} rows per export"),
        report.Figure(f"tool_health.{key}.export_peak", group,
                      f"{db}: CSV export, peak Python memory", "MiB", [peak],
                      note=f"tracemalloc peak while streaming {fill.sagas:,} rows"),
    ]  # fmt: skip


def _size(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1_000}k"


def _incremental_fold(fill: Any) -> float:
    """Mark the newest ``TOUCHED`` sagas changed now, fold: steps folded per second."""
    from django.utils import timezone

    from sagaboard.health.services.tool_rollup import rollup_fold
    from sagaboard.models import Saga

    newest = Saga.objects.filter(project=fill.project).order_by("-changed_at", "-id")
    pks = list(newest.values_list("pk", flat=True)[:TOUCHED])
    Saga.objects.filter(pk__in=pks).update(changed_at=timezone.now())
    done = rollup_fold()
    return done.steps / done.seconds if done.seconds else 0.0


def _queries(client: Any, url: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url)
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    if response.status_code != 200:
        raise RuntimeError(f"GET {url}: {response.status_code}")
    return len(ctx.captured_queries)


def _stream(client: Any) -> int:
    response = client.get("/sagas/export.csv")
    lines = 0
    for piece in response.streaming_content:
        lines += piece.count(b"\n")
    return lines - 1  # the header


def _export_rate(client: Any, sagas: int) -> float:
    began = time.perf_counter()
    rows = _stream(client)
    if rows != sagas:
        raise RuntimeError(f"export: {rows} rows, {sagas} sagas stored")
    return rows / (time.perf_counter() - began)


def _export_peak(client: Any, sagas: int) -> float:
    tracemalloc.start()
    try:
        rows = _stream(client)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    if rows != sagas:
        raise RuntimeError(f"export: {rows} rows, {sagas} sagas stored")
    return peak / 2**20


if __name__ == "__main__":
    main()

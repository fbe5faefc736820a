"""Saga search at size: ``python -m benchmarks.search [--quick] [--db sqlite] [--steps N]``.

Fills a throw-away database (SQLite and PostgreSQL) with the pages benchmark's sagas
(``benchmarks.pages.Filler``: four steps each, inputs ``{"order": n, "amount": ...}``,
outputs ``{"ref": "r-<step>"}``), then gives every failed step an error naming a ticket,
one step in a thousand an output with ``refund.id``, and one saga in a hundred a posting
token; it grows to 1M stored steps (``--quick``: 20,000, SQLite only). At each size it
times the first page of the saga list (``/``) for each kind of search, as a logged-in
user gets it (Django's test ``Client``), beside the minimal page floor of
``benchmarks.pages``:

* a name or id prefix (``q``), a tool, the actor (token);
* error text: a rare word (a ticket) and a common one (every failed step's);
* the same as plain words in the search box (``q``: a name or id prefix, or error text);
* JSON: a string value, a number value, "has this path" (rare), at one path each;
* a status within a started-between window; the list sorted by duration.

Each search's SQL query count is counted on a separate request and must not grow with
the size. At the largest size, the plan of each search's query is printed (``EXPLAIN``):
the step searches must read the FTS5 table (SQLite) or the GIN indexes (PostgreSQL).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from benchmarks import pages, report
from tests.support.live_server import manage, temp_database

FULL_SIZES = [100_000, 1_000_000]
QUICK_SIZES = [20_000]
AIM = report.Aim("a search < 100 ms at 1M steps", "value", "<=", 100.0)
TOKEN_EVERY = 100  # one saga in a hundred was posted by the token "bench-bot"
REFUND_EVERY = 1000  # one step in a thousand has output.refund.id


def searches(fill: Any) -> dict[str, tuple[str, str]]:
    """Search kind -> (title, list URL), chosen to find a few sagas at every size."""
    middle = fill.sagas // 2
    step = middle * pages.STEPS_PER_SAGA + 2  # a completed step of the middle saga
    failed = (middle // 20) * 20 + 1  # a rolled-back saga near the middle: its last step failed
    ticket = failed * pages.STEPS_PER_SAGA + pages.STEPS_PER_SAGA
    return {
        "q": ("name or id prefix", f"/?q=s-{middle:08d}"),
        "tool": ("one tool", "/?tool=book_hotel"),
        "actor": ("actor (posting token)", "/?actor=bench-bot"),
        "error_rare": ("error text, a rare word", f"/?error=T-{ticket}"),
        "error_common": ("error text, a common word", "/?error=timed+out"),
        "words_rare": ("plain words: a rare error word (the box)", f"/?q=T-{ticket}"),
        "words_common": ("plain words: common error words (the box)", "/?q=timed+out"),
        "json_string": (
            "JSON path = string",
            "/?json=" + quote(f'output.ref = "r-{step}"'),
        ),
        "json_number": ("JSON path = number", "/?json=" + quote(f"input.order = {middle}")),
        "json_has": ("JSON has path (rare)", "/?json=output.refund.id"),
        "status_window": (
            "status, started between",
            "/?status=ROLLED_BACK&started_after="
            + _at(fill, middle - 5000)
            + "&started_before="
            + _at(fill, middle),
        ),
        "sort_duration": ("sorted by duration", "/?sort=duration"),
    }


def _at(fill: Any, n: int) -> str:
    from datetime import timedelta

    # Filler: saga n received at START + n seconds - 30 s
    return (pages.START + timedelta(seconds=max(0, n) - 30)).strftime("%Y-%m-%dT%H:%M:%S")


def main(argv: list[str] | None = None) -> None:
    parser = report.cli((__doc__ or "").splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], action="append")
    parser.add_argument("--steps", type=int, action="append", help="sizes in stored steps")
    parser.add_argument("--requests", type=int, default=0, help="requests per sample")
    parser.add_argument("--fill-budget", type=float, default=600.0)
    parser.add_argument("--explain", action="store_true", help="print plans at every size")
    args = parser.parse_args(argv)
    figures = report.per_database("benchmarks.search", args, argv, measure_database, timeout=3600)
    report.emit(figures, args.json)


def measure_database(kind: str, args: Any) -> list[report.Figure]:
    sizes = sorted(args.steps or (QUICK_SIZES if args.quick else FULL_SIZES))
    per_sample = args.requests or (10 if args.quick else 15)
    with tempfile.TemporaryDirectory() as tmp, temp_database(kind, Path(tmp)) as url:
        manage(url, "migrate", "--no-input", "-v0", settings="benchmarks.settings")
        os.environ.update(
            DATABASE_URL=url,
            DJANGO_SETTINGS_MODULE="benchmarks.settings",
            SAGABOARD_DEBUG="0",
            SAGABOARD_LOG_FORMAT="text",
        )
        os.environ.setdefault("SAGABOARD_SECRET_KEY", "bench-only-not-secret-0123456789abcdef")
        import django

        django.setup()
        return _measure(kind, sizes, args, per_sample)


def _measure(kind: str, sizes: list[int], args: Any, per_sample: int) -> list[report.Figure]:
    from django.conf import settings

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    fill = pages.Filler()
    token = _token(fill.project)
    client = pages._logged_in_client(fill.project)
    figures: list[report.Figure] = []
    filling = 0.0
    for size in sizes:
        t0 = time.monotonic()
        fill.grow_to(size // pages.STEPS_PER_SAGA, deadline=t0 + args.fill_budget - filling)
        _decorate(token)
        filling += time.monotonic() - t0
        stored = fill.sagas * pages.STEPS_PER_SAGA
        print(f"{kind}: {stored:,} steps stored; {filling:.0f} s of filling so far", flush=True)
        kinds = searches(fill)
        urls = {name: url for name, (_, url) in kinds.items()}
        floor_url = f"/bench/page-floor?saga={fill.detail_saga_id}"
        queries = {name: pages._count_queries(client, url) for name, url in urls.items()}
        if args.explain or size == sizes[-1]:
            _explain(kind, client, urls)
        floor_samples: list[float] = []
        samples: dict[str, list[float]] = {name: [] for name in urls}
        for _ in range(args.runs):
            medians = pages._sample({"floor": floor_url, **urls}, client, per_sample)
            floor_samples.append(medians["floor"])
            for name in urls:
                samples[name].append(medians[name])
        size_key = pages._size_key(size)
        for name, (title, url) in kinds.items():
            figures.append(
                report.Figure(
                    key=f"search.{kind}.{name}.{size_key}",
                    group="Search",
                    label=f"{pages._db_name(kind)}: {title}, {size_key} steps",
                    unit="ms",
                    samples=samples[name],
                    floor_label=pages.FLOOR_LABEL,
                    floor_samples=list(floor_samples),
                    aim=AIM if size >= 1_000_000 else None,
                    queries=queries[name],
                    note=f"{stored:,} steps in {fill.sagas:,} sagas; GET {url}",
                )
            )
    return figures


def _token(project: Any) -> Any:
    from sagaboard.models import ApiToken

    return ApiToken.objects.create(
        project=project, label="bench-bot", prefix="benchbot", secret_hash="0" * 64
    )


def _decorate(token: Any) -> None:
    """What the pages benchmark's rows lack for searching: errors, a rare output path and a
    posting token (plain UPDATEs: on SQLite the FTS5 triggers index them as any write)."""
    from django.db import connection, transaction

    failed = (
        "UPDATE sagaboard_step SET error = 'ConnectionError: upstream ' || tool_name"
        " || ' timed out (ticket T-' || id || ')' WHERE state = 'FAILED' AND error IS NULL"
    )
    refund = (
        'UPDATE sagaboard_step SET output = \'{"ref": "r-\' || id || \'", "refund": '
        '{"id": "re-\' || id || \'"}}\' WHERE id % %s = 7 AND output IS NOT NULL'
        " AND output NOT LIKE '%%refund%%'"
    )
    posted = (
        "UPDATE sagaboard_saga SET posted_by_token_id = %s"
        " WHERE id % %s = 5 AND posted_by_token_id IS NULL"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(failed)
        cursor.execute(refund.replace("id % %s", "id %% %s"), [REFUND_EVERY])
        cursor.execute(posted.replace("id % %s", "id %% %s"), [token.pk, TOKEN_EVERY])
        cursor.execute("ANALYZE")


def _explain(kind: str, client: Any, urls: dict[str, str]) -> None:
    """Each search's saga query and its plan (the query that reads ``sagaboard_saga``
    with an ORDER BY: the list's page)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for name, url in urls.items():
        with CaptureQueriesContext(connection) as ctx:
            client.get(url)
        sql = next(
            q["sql"]
            for q in ctx.captured_queries
            if 'FROM "sagaboard_saga"' in q["sql"] and "ORDER BY" in q["sql"]
        )
        with connection.cursor() as cursor:
            prefix = "EXPLAIN" if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN"
            cursor.execute(f"{prefix} {sql}")
            plan = "\n    ".join(str(row[-1]) for row in cursor.fetchall())
        print(f"--- {kind} {name}: {url}\n    {plan}", flush=True)


if __name__ == "__main__":
    main()

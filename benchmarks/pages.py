"""Dashboard pages at size: ``python -m benchmarks.pages [--quick] [--db sqlite] [--steps N]``.

Fills a throw-away database (SQLite and PostgreSQL, ``tests.support.live_server.temp_database``)
in bulk with sagas of four steps each, two events per step, decided approvals
for the rolled-back sagas and a fixed 50 pending approvals, growing it to 1,000,
100,000 and 1,000,000 stored steps (``--quick``: 1,000 and 20,000, SQLite only);
at each size it times whole pages as a logged-in user gets them (Django's test
``Client``: URL routing, middleware, session, view, queries, template; DEBUG off,
no template instrumentation):

* the saga list (``/``), newest first, first keyset page; also the page that starts
  half-way down the cursor chain, and the list filtered by a status;
* one saga's page (``/sagas/<project>/<id>/``): its steps, approvals, plan, events;
* the approval queue (``/approvals/``): the pending approvals, oldest first;
* the overview (``/overview/``) with its cache cleared: counts per status, what needs a
  person, recent failures, the last hour's and day's throughput (the counts and charts
  from the rollup the database's triggers keep as the fill inserts, ``models.overview``).

Each page's SQL query count is counted on a separate request (not timed), and
must be the same at every size: the pages read through indexes that match their
ORDER BY and never count or offset.

The floor is a minimal page measured the same way in the same run
(``/bench/page-floor`` in ``benchmarks/urls.py``): login required, one indexed
query, a tiny template rendered with the same context processors. What a page
costs above that is its own queries and template, which is what should not grow.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from benchmarks import report
from tests.support.live_server import manage, temp_database

STEPS_PER_SAGA = 4
EVENTS_PER_STEP = 2
PENDING_APPROVALS = 50
TOOLS = [
    "charge_card",
    "reserve_stock",
    "send_email",
    "book_hotel",
    "book_flight",
    "create_ticket",
    "provision_vm",
    "transfer_funds",
]
FULL_SIZES = [1_000, 100_000, 1_000_000]
QUICK_SIZES = [1_000, 20_000]
CHUNK_SAGAS = 5_000
PAGES = [
    ("list", "saga list"),
    ("list_deep", "saga list, half-way down"),
    ("list_status", "saga list, one status"),
    ("detail", "saga page"),
    ("queue", "approval queue"),
    ("overview", "overview, cache cold"),
]
FLOOR_LABEL = "minimal page: login, one indexed query, tiny template"
# The aim is worded for 1M sagas; the top size here is 1M steps (250,000 sagas).
AIM = report.Aim("list page < 20 ms at 1M, constant queries", "value", "<=", 20.0)
# Issue 19: the overview's counts and charts read the rollup (models.overview), not the sagas.
OVERVIEW_AIM = report.Aim("overview, cache cold, < 50 ms at 1M steps", "value", "<=", 50.0)
AIMS = {"list": AIM, "overview": OVERVIEW_AIM}
# Saga n is updated (and stored, by the server's clock) at START + n seconds: the newest of
# the 250,000 sagas of the 1M size are from the last few hours, so the overview's last-day
# chart has real rows to count.
START = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=260_000)


def main(argv: list[str] | None = None) -> None:
    parser = report.cli((__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--db",
        choices=["sqlite", "postgres"],
        action="append",
        help="database (repeatable); default both, SQLite only with --quick",
    )
    parser.add_argument(
        "--steps",
        type=int,
        action="append",
        help="sizes in stored steps (repeatable); default 1k, 100k, 1M",
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=0,
        help="requests per sample (its median); default 15, quick 10",
    )
    parser.add_argument(
        "--fill-budget",
        type=float,
        default=240.0,
        help="seconds one database's fill may take in all (default 240)",
    )
    args = parser.parse_args(argv)
    figures = report.per_database("benchmarks.pages", args, argv, measure_database, timeout=1200)
    report.emit(figures, args.json)


def measure_database(kind: str, args: Any) -> list[report.Figure]:
    sizes = sorted(args.steps or (QUICK_SIZES if args.quick else FULL_SIZES))
    per_sample = args.requests or (10 if args.quick else 15)
    with tempfile.TemporaryDirectory() as tmp, temp_database(kind, Path(tmp)) as url:
        manage(url, "migrate", "--no-input", "-v0", settings="benchmarks.settings")
        os.environ.update(
            DATABASE_URL=url,
            DJANGO_SETTINGS_MODULE="benchmarks.settings",
            SAGABOARD_DEBUG="0",  # as in production: no query log, no debug pages
            SAGABOARD_LOG_FORMAT="text",
        )
        os.environ.setdefault("SAGABOARD_SECRET_KEY", "bench-only-not-secret-0123456789abcdef")
        import django

        django.setup()
        return _measure_sizes(kind, sizes, args.runs, per_sample, args.fill_budget)


def _measure_sizes(
    kind: str, sizes: list[int], runs: int, per_sample: int, budget: float
) -> list[report.Figure]:
    from django.conf import settings

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    fill = Filler()
    client = _logged_in_client(fill.project)
    figures: list[report.Figure] = []
    seen_queries: dict[str, int] = {}
    filling = 0.0  # seconds spent filling so far: the budget bounds the fill, not the timing
    for size in sizes:
        t0 = time.monotonic()
        fill.grow_to(size // STEPS_PER_SAGA, deadline=t0 + budget - filling)
        filling += time.monotonic() - t0
        stored = fill.sagas * STEPS_PER_SAGA
        print(
            f"{kind}: {stored:,} steps ({fill.sagas:,} sagas) stored; "
            f"{filling:.0f} s of filling so far",
            flush=True,
        )
        urls = {
            "list": "/",
            "list_deep": f"/?cursor={fill.cursor_half_way()}",
            "list_status": "/?status=ROLLBACK_FAILED",
            "detail": f"/sagas/{fill.project.slug}/{fill.detail_saga_id}/",
            "queue": "/approvals/",
            "overview": "/overview/",
        }
        floor_url = f"/bench/page-floor?saga={fill.detail_saga_id}"
        queries = {page: _count_queries(client, url) for page, url in urls.items()}
        floor_samples: list[float] = []
        samples: dict[str, list[float]] = {page: [] for page in urls}
        for _ in range(runs):
            medians = _sample({"floor": floor_url, **urls}, client, per_sample)
            floor_samples.append(medians["floor"])
            for page in urls:
                samples[page].append(medians[page])
        size_key = _size_key(size)
        for page, title in PAGES:
            if page in seen_queries and seen_queries[page] != queries[page]:
                print(
                    f"WARNING: {title}: {queries[page]} queries at {size:,} steps, "
                    f"{seen_queries[page]} at the smaller size",
                    flush=True,
                )
            seen_queries.setdefault(page, queries[page])
            note = (
                f"{stored:,} steps in {fill.sagas:,} sagas, {fill.events:,} events, "
                f"{fill.approvals:,} approvals ({PENDING_APPROVALS} pending)"
            )
            if stored < size:
                note += f"; the fill stopped at its {budget:g} s budget"
            note += f"; filling took {filling:.0f} s in all"
            figures.append(
                report.Figure(
                    key=f"pages.{kind}.{page}.{size_key}",
                    group="Dashboard pages",
                    label=f"{_db_name(kind)}: {title}, {size_key} steps",
                    unit="ms",
                    samples=samples[page],
                    floor_label=FLOOR_LABEL,
                    floor_samples=list(floor_samples),
                    aim=AIMS.get(page) if size >= 1_000_000 else None,
                    queries=queries[page],
                    note=note,
                )
            )
    return figures


def _db_name(kind: str) -> str:
    return {"sqlite": "SQLite", "postgres": "PostgreSQL"}[kind]


def _size_key(size: int) -> str:
    if size >= 1_000_000 and size % 1_000_000 == 0:
        return f"{size // 1_000_000}M"
    if size >= 1_000 and size % 1_000 == 0:
        return f"{size // 1_000}k"
    return str(size)


def _logged_in_client(project: Any) -> Any:
    """A Django test client with a session, as a browser has after logging in.

    Not ``setup_test_environment()``: it instruments template rendering, which is
    not what a user's request pays.
    """
    from django.contrib.auth import get_user_model
    from django.test import Client

    user = get_user_model().objects.create_superuser("bench", "b@example.com", "bench-pw-1")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    return client


def _get(client: Any, url: str) -> None:
    response = client.get(url)
    if response.status_code != 200:
        raise RuntimeError(f"GET {url}: {response.status_code}")


def _count_queries(client: Any, url: str) -> int:
    from django.core.cache import cache
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _get(client, url)  # warm: the session's user, the template cache
    cache.clear()  # as timed: the overview's cache cold
    with CaptureQueriesContext(connection) as ctx:
        _get(client, url)
    return len(ctx.captured_queries)


def _sample(
    urls: dict[str, str], client: Any, count: int, max_seconds: float = 30.0
) -> dict[str, float]:
    """One run: the median of ``count`` requests per URL (bounded in time), in milliseconds.

    The URLs take turns request by request, so the floor and the pages see the same
    load on a shared machine and their ratio holds even when the absolute times drift.
    """
    from django.core.cache import cache

    timings: dict[str, list[float]] = {name: [] for name in urls}
    deadline = time.monotonic() + max_seconds
    for url in urls.values():
        _get(client, url)
    for n in range(count):
        if n and time.monotonic() > deadline:
            break
        for name, url in urls.items():
            cache.clear()  # the overview's counts and chart: time the cold page
            began = time.perf_counter()
            _get(client, url)
            timings[name].append((time.perf_counter() - began) * 1e3)
    return {name: statistics.median(values) for name, values in timings.items()}


class Filler:
    """Grows the database saga by saga (in bulk, chunk by chunk), ids chosen here.

    Explicit ids let steps, events and approvals point at rows not read back;
    PostgreSQL's sequences are reset afterwards so the server's own inserts go on.
    """

    def __init__(self) -> None:
        from sagaboard.models import Approval, Event, Project, Saga, Step
        from sagaboard.record.services.ingest_bulk import Table

        self.Table = Table
        self.project = Project.objects.create(slug="big", name="Big")
        self.sagas = self.steps = self.events = self.approvals = 0
        self.tables: dict[type, Table] = {}  # columns: those of the first row made
        self.models = [Saga, Step, Event, Approval]
        # The saga page shown at every size: one of the first sagas, waiting for approval.
        self.detail_saga_id = "s-00000007"

    def cursor_half_way(self) -> str:
        """The saga list's cursor for the page that starts half-way down the whole list."""
        from sagaboard.access.reads.visible import encode_cursor
        from sagaboard.models import Saga

        middle = Saga.objects.filter(project=self.project).order_by("-changed_at", "-id")
        return encode_cursor(middle[self.sagas // 2])

    def grow_to(self, sagas: int, *, deadline: float) -> None:
        from django.db import connection, transaction

        while self.sagas < sagas and time.monotonic() < deadline:
            end = min(sagas, self.sagas + CHUNK_SAGAS)
            with transaction.atomic():
                self._chunk(self.sagas, end)
            self.sagas = end
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
            if connection.vendor == "postgresql":
                from django.core.management.color import no_style

                for sql in connection.ops.sequence_reset_sql(no_style(), self.models):
                    cursor.execute(sql)

    def _chunk(self, first: int, end: int) -> None:
        sagas, steps, events, approvals = [], [], [], []
        for n in range(first, end):
            status, step_states = _shape(n)
            at = START + timedelta(seconds=n)
            saga_id = f"s-{n:08d}"
            saga_pk = n + 1
            sagas.append(
                SimpleNamespace(
                    id=saga_pk,
                    project_id=self.project.pk,
                    saga_id=saga_id,
                    name=f"order {n}",
                    status=status,
                    driver="client",
                    created_at=at - timedelta(seconds=30),
                    updated_at=at,
                    received_at=at - timedelta(seconds=30),
                    changed_at=at,
                    seq=STEPS_PER_SAGA * EVENTS_PER_STEP,
                    next_step_number=STEPS_PER_SAGA + 1,
                    options={},
                    failed_step="step-4" if status != "COMPLETED" else None,
                )
            )
            for k, state in enumerate(step_states, start=1):
                step_pk = n * STEPS_PER_SAGA + k
                tool = TOOLS[(n + k) % len(TOOLS)]
                steps.append(
                    SimpleNamespace(
                        id=step_pk,
                        saga_id=saga_pk,
                        step_id=f"step-{k}",
                        position=k,
                        tool_name=tool,
                        state=state,
                        input={"order": n, "amount": 10 * k},
                        output=None if state in ("PENDING", "FAILED") else {"ref": f"r-{step_pk}"},
                        has_undo=True,
                        requires_approval=False,
                        reversibility="reversible",
                        idempotency_key=f"{saga_id}:step-{k}",
                        undo={"kind": "client"},
                        metadata={},
                        created_at=at,
                        updated_at=at,
                        completed_at=at,
                        changed_at=at,
                    )
                )
                for e in range(EVENTS_PER_STEP):
                    seq = (k - 1) * EVENTS_PER_STEP + e + 1
                    events.append(
                        SimpleNamespace(
                            id=saga_pk * 100 + seq,
                            project_id=self.project.pk,
                            saga_id=saga_pk,
                            seq=seq,
                            client_event_id=f"{saga_id}:{seq}",
                            digest="0" * 64,
                            kind="step",
                            step_id=f"step-{k}",
                            tool_name=tool,
                            from_state=None if e == 0 else "PENDING",
                            to_state="PENDING" if e == 0 else state,
                            at=at,
                            recorded_at=at,
                        )
                    )
            decided = status == "ROLLED_BACK"
            if decided or n < PENDING_APPROVALS:
                approvals.append(
                    SimpleNamespace(
                        id=saga_pk,
                        project_id=self.project.pk,
                        saga_id=saga_pk,
                        step_id=n * STEPS_PER_SAGA + STEPS_PER_SAGA - 1,  # the undo it is about
                        status="APPROVED" if decided else "PENDING",
                        required=1,
                        why="policy 'refunds' (v1) matched",
                        policy_snapshot={},
                        plan={"kind": "client", "tool": "refund"},
                        plan_hash="0" * 64,
                        created_at=at,
                        decided_at=at if decided else None,
                        decided_reason="checked with finance" if decided else "",
                    )
                )
        from sagaboard.models import Approval, Event, Saga, Step

        for model, rows in ((Saga, sagas), (Step, steps), (Event, events), (Approval, approvals)):
            if rows:
                table = self.tables.get(model) or self.Table(model, list(vars(rows[0])))
                self.tables[model] = table
                _insert(table, rows)
        self.steps += len(steps)
        self.events += len(events)
        self.approvals += len(approvals)


def _insert(table: Any, rows: list[Any]) -> None:
    """Many rows at once: ``COPY`` on PostgreSQL (several times faster than even pipelined
    INSERTs, which keeps the 1M fill within minutes), the project's bulk INSERT elsewhere."""
    from django.db import connection

    if connection.vendor != "postgresql" or not rows:
        table.insert(rows)
        return
    sql = f"COPY {table.table} ({', '.join(table.columns)}) FROM STDIN"
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for row in rows:
            copy.write_row(table.row(row))


def _shape(n: int) -> tuple[str, list[str]]:
    """Saga ``n``'s status and its steps' states: mostly completed, some rolled back or failed.

    The first ``PENDING_APPROVALS`` sagas are rolling back, their last undo waiting for a
    person, so the approval queue has the same content at every size.
    """
    done = ["COMPLETED"] * STEPS_PER_SAGA
    if n < PENDING_APPROVALS:
        waiting = ["AWAITING_APPROVAL", "FAILED"]
        return "COMPENSATING", ["COMPLETED"] * (STEPS_PER_SAGA - 2) + waiting
    match n % 20:
        case 0:
            return "ROLLBACK_FAILED", ["ROLLED_BACK", "ROLLBACK_FAILED", "COMPLETED", "FAILED"]
        case 1 | 2:
            return "ROLLED_BACK", ["ROLLED_BACK"] * (STEPS_PER_SAGA - 1) + ["FAILED"]
        case 3:
            return "IN_PROGRESS", ["COMPLETED"] * (STEPS_PER_SAGA - 1) + ["PENDING"]
    return "COMPLETED", done


if __name__ == "__main__":
    main()

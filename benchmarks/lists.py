"""Saga list speed at size: ``python -m benchmarks.lists [--sagas 100000] [--db sqlite|postgres]``.

Fills a throw-away database with N sagas (inserted directly, in bulk), then times
the list selector (``saga_list``, which the API and the dashboard share): the
first page, a page deep in the cursor chain, and a status-filtered page, each
with its query count; then whole dashboard pages as a logged-in user gets them
(the saga list, filtered, a deep page, and the overview with its capped counts).
The figures should not grow with N: keyset pagination over an index that
matches the ORDER BY, no OFFSET, no COUNT.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.live import manage, temp_database


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sagas", type=int, default=100_000)
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, temp_database(args.db, Path(tmp)) as url:
        manage(url, "migrate", "--no-input", "-v0")
        os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="sagaboard.settings")
        os.environ.setdefault("SAGABOARD_DEBUG", "1")
        import django

        django.setup()
        run(args.sagas, args.repeat, args.db)


def run(count: int, repeat: int, db: str) -> None:
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from sagaboard.bulk import Table
    from sagaboard.models import Project, Saga
    from sagaboard.selectors import encode_cursor, saga_list

    project = Project.objects.create(slug="big", name="Big")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    statuses = ["COMPLETED", "ROLLED_BACK", "ROLLBACK_FAILED", "IN_PROGRESS"]
    table = Table(Saga, ["project_id", "saga_id", "name", "status", "driver", "created_at",
                         "updated_at", "seq", "next_step_number", "options"])  # fmt: skip
    for offset in range(0, count, 10_000):
        rows = []
        for n in range(offset, min(count, offset + 10_000)):
            at = start + timedelta(seconds=n)
            row = Saga(project_id=project.pk, saga_id=f"s-{n:08d}", name=f"saga {n}",
                       status=statuses[n % 4], driver="client", created_at=at, updated_at=at,
                       seq=1, next_step_number=1, options={})  # fmt: skip
            rows.append(row)
        with transaction.atomic():
            table.insert(rows)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")

    def timed(label: str, **kwargs: object) -> None:
        samples, queries = [], 0
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as ctx:
                began = time.perf_counter()
                saga_list(projects=[project], limit=50, **kwargs)  # type: ignore[arg-type]
                samples.append((time.perf_counter() - began) * 1e3)
            queries = len(ctx.captured_queries)
        print(f"{db:<9} {count:>9,} {label:<34} {statistics.median(samples):8.2f} ms  {queries} q")

    timed("first page")
    middle = Saga.objects.filter(project=project).order_by("-updated_at", "-id")[count // 2]
    cursor = encode_cursor(middle)
    timed("a page half-way down (cursor)", cursor=cursor)
    timed("first page, status=ROLLBACK_FAILED", statuses=["ROLLBACK_FAILED"])
    pages(project, repeat, db, count, cursor)


def pages(project: object, repeat: int, db: str, count: int, cursor: str) -> None:
    """Whole pages through Django's test client: view, queries, template, as a user sees them."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    # Not setup_test_environment(): it instruments template rendering, which is not
    # what a user's request pays.
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    user = get_user_model().objects.create_superuser("bench", "b@example.com", "bench-pw-1")
    project.members.add(user)  # type: ignore[attr-defined]
    client = Client()
    client.force_login(user)
    for label, url in [
        ("page: saga list", "/"),
        ("page: list, status=ROLLBACK_FAILED", "/?status=ROLLBACK_FAILED"),
        ("page: list, half-way down", f"/?cursor={cursor}"),
        ("page: overview (counts capped)", "/overview/"),
    ]:
        samples, queries = [], 0
        for _ in range(repeat):
            cache.clear()  # the overview's chart cache: time the cold page
            with CaptureQueriesContext(connection) as ctx:
                began = time.perf_counter()
                assert client.get(url).status_code == 200
                samples.append((time.perf_counter() - began) * 1e3)
            queries = len(ctx.captured_queries)
        print(f"{db:<9} {count:>9,} {label:<34} {statistics.median(samples):8.2f} ms  {queries} q")


if __name__ == "__main__":
    main()

"""Where a POST of events spends its CPU: ``python -m benchmarks.profile_ingest``.

The web process's whole path, in this process: the production WSGI application
(``sagaboard.config.wsgi``: the bearer-token handler, ninja, the token, the body, the
rules, the writes, the commit) called with an environ per request, as gunicorn calls it,
on a throw-away SQLite file or PostgreSQL database. It prints, per request, the CPU of the
whole request and of each part of the path (cProfile's cumulative times, scaled to the
unprofiled CPU), and the same for the plain django-ninja endpoints that
``benchmarks.ingest`` compares with (``/bench/plain/event``, ``/bench/plain/events``),
through the browser's whole middleware. ``--out DIR`` keeps each profile's top functions
as text (benchmarks/profiles/ holds the published ones, cited in benchmarks/commentary.md).

No network, no server, no client: what is left is the server's own work, which is what
the aims compare (the HTTP parsing of gunicorn is the same for every endpoint). The parts
are cProfile's, scaled as a whole to the unprofiled CPU: cProfile slows Python calls more
than C (the database, orjson, pydantic-core), so Python-heavy parts read high; compare a
part between runs, and the totals between endpoints.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.live_server import temp_database

PARTS = [
    ("whole request", "django/core/handlers/wsgi.py", "__call__"),
    ("token", "sagaboard/access/api/caller.py", "authenticate"),
    ("body parse (orjson)", "sagaboard/infra/http/limits.py", "parse_body"),
    ("schema (pydantic + the batch pass)", "pydantic/main.py", "model_validate"),
    ("  the batch pass (texts, times, values)", "sagaboard/api/event_schema.py", "run"),
    ("ingest: rules, writes, commit", "sagaboard/record/services/ingest.py", "events_ingest"),
    ("  load (the batch's rows, locked)", "sagaboard/record/services/ingest.py", "__init__"),
    ("  rules (undo_core's check_change)", "sagaboard/record/services/ingest.py", "_check_move"),
    ("  writes (multi-row INSERT, executemany)", "sagaboard/record/services/ingest.py", "write"),
    ("  commit", "django/db/backends/base/base.py", "commit"),
    (
        "rollback requests (after the batch)",
        "sagaboard/actions/services/saga_stop.py",
        "after_batch",
    ),
    ("plain: its ORM insert / bulk_create", "benchmarks/urls.py", "plain_event"),
    ("plain: its ORM insert / bulk_create", "benchmarks/urls.py", "plain_events"),
]


@contextmanager
def _database(kind: str) -> Iterator[str]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{Path(tmp) / 'profile.sqlite3'}"
        return
    with tempfile.TemporaryDirectory() as tmp, temp_database("postgres", Path(tmp)) as url:
        yield url


def _caller(application: Any, path: str, token: str) -> Callable[[bytes], None]:
    def post(body: bytes) -> None:
        environ = {
            "REQUEST_METHOD": "POST", "PATH_INFO": path, "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000", "HTTP_HOST": "127.0.0.1", "wsgi.url_scheme": "http",
            "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body), "REMOTE_ADDR": "127.0.0.1",
        }  # fmt: skip
        if token:
            environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
        status: list[str] = []
        for _ in application(environ, lambda s, h, e=None: status.append(s)):
            pass
        if not status[0].startswith("200"):
            raise RuntimeError(f"{path} answered {status[0]}")

    return post


def _parts(stats: pstats.Stats, scale: float, requests: int) -> list[tuple[str, float]]:
    found: dict[str, float] = {}
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for label, file, name in PARTS:
        for (filename, _, funcname), (_, _, _, cumulative, _) in table.items():
            if funcname == name and filename.endswith(file):
                found[label] = found.get(label, 0.0) + cumulative * scale / requests * 1e6
    labels = dict.fromkeys(label for label, _, _ in PARTS)  # in order, each once
    return [(label, found[label]) for label in labels if label in found]


def measure(post: Callable[[bytes], None], bodies: list[bytes], out: Path | None, name: str) -> str:
    """CPU per request of ``bodies`` posted in turn, unprofiled then profiled, as Markdown."""
    for body in bodies[:20]:
        post(body)  # warm: connections, caches, the first saga of each kind
    half = 20 + (len(bodies) - 20) // 2
    timed, profiled = bodies[20:half], bodies[half:]
    started = time.process_time()
    for body in timed:
        post(body)
    cpu = (time.process_time() - started) / len(timed)
    profile = cProfile.Profile()
    profile.enable()
    for body in profiled:
        post(body)
    profile.disable()
    stats = pstats.Stats(profile)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    scale = cpu * len(profiled) / total if total else 1.0
    lines = [f"**{name}**: {cpu * 1e6:,.0f} us of CPU per request ({len(timed)} requests)", "",
             "| part | us per request | share |", "|---|---:|---:|"]  # fmt: skip
    for label, us in _parts(stats, scale, len(profiled)):
        lines.append(f"| {label} | {us:,.0f} | {us / (cpu * 1e6):.0%} |")
    if out is not None:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(60)
        (out / f"{name.replace(' ', '_').replace(',', '')}.txt").write_text(text.getvalue())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--events", type=int, default=3000, help="single events (3000)")
    parser.add_argument("--batched", type=int, default=30_000, help="events in batches of 100")
    parser.add_argument("--out", type=Path, help="keep each profile's top functions here")
    args = parser.parse_args(argv)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    with _database(args.db) as url:
        os.environ["DATABASE_URL"] = url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
        os.environ["SAGABOARD_DEBUG"] = "0"
        # As a web process runs (sagaboard/config/gunicorn.py sets it there).
        os.environ.setdefault("SAGABOARD_DB_CONN_MAX_AGE", "600")
        # Imported here, not at the top: Django reads the settings (the throw-away database
        # named just above) when the WSGI module loads, and the models need it loaded.
        from django.core.management import call_command

        from sagaboard.config import wsgi

        call_command("migrate", verbosity=0)
        from benchmarks.ingest import lanes, saga_texts
        from sagaboard.access.services.tokens import token_create
        from sagaboard.models import Project

        project = Project.objects.create(slug="profile", name="Profile")
        token = token_create(project=project, label="profile").secret
        app = wsgi.application
        runs = [
            ("sagaboard single events", "/api/v1/events", token, 1, args.events),
            ("plain single events", "/bench/plain/event", "", 0, args.events),
            ("sagaboard batches of 100", "/api/v1/events", token, 100, args.batched),
            ("plain batches of 100", "/bench/plain/events", "", 100, args.batched),
        ]
        for name, path, auth, per, count in runs:
            bodies = lanes(saga_texts(count), 1, per)[0]
            label = f"{name}, {args.db}"
            print(measure(_caller(app, path, auth), bodies, args.out, label), end="\n\n")
        from django.db import connections

        connections.close_all()


if __name__ == "__main__":
    main()

"""What one ``POST /api/v1/events`` costs a web process, measured in a process of its own.

``python -m tests.support.batch_cost DATABASE_URL TOKEN BODY`` (or ``cost()``) serves the
WSGI application in that process (Django's test client: no network, no server), DEBUG off
as in production, against a migrated database (``tests.support.live_server.prepare``),
and posts one body:

* ``accepted``: 1,000 events (``SAGABOARD_API_MAX_BATCH``) of StoreBot runs, as the SDK
  sends them (compact JSON, 1 MB: about as large as a batch of the limit gets);
* ``over``: 1,001 such events;
* ``empty``: 349,000 empty objects (``{"events":[{},{},...]}``, 1 MB, under the body
  limit): many tiny items.

Each body once per database (its sagas' ids are fixed: posted again, they are conflicts).
A first small batch warms the process up (imports, caches); then the peak resident memory
is reset (``/proc/self/clear_refs``) and the body posted. It prints one JSON line: the
status, the error's field and message, the request's wall and CPU seconds, and its memory
growth: the peak resident memory during the request (``VmHWM``) less the resident memory
just before it, in KiB. Linux only.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BODIES = ("accepted", "over", "empty")
EMPTY_ITEMS = 349_000
ROOT = Path(__file__).resolve().parents[2]


def cost(database_url: str, token: str, body: str) -> dict[str, Any]:
    """The figures of posting ``body`` (one of ``BODIES``), from a fresh process."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.batch_cost", database_url, token, body],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return figures


def storebot_batch(count: int, prefix: str) -> bytes:
    """``count`` events of StoreBot runs (three steps, a failure, a rollback: 13 events a
    run), each run a saga of its own, the last one cut short; as compact JSON."""
    from tests.support.agent_runs import storebot_events

    template = storebot_events(f"{prefix}-0000")
    old, text = template[0]["saga"]["id"], json.dumps(template)
    events: list[dict[str, Any]] = []
    for n in range(-(-count // len(template))):
        events += json.loads(text.replace(old, f"{prefix}-{n:04d}"))
    return json.dumps({"events": events[:count]}, separators=(",", ":")).encode()


def body_of(kind: str) -> bytes:
    if kind == "empty":
        return b'{"events":[' + b",".join([b"{}"] * EMPTY_ITEMS) + b"]}"
    return storebot_batch(1000 if kind == "accepted" else 1001, kind)


def _status_kib(name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    raise LookupError(name)


def measure(token: str, kind: str) -> dict[str, Any]:
    from django.test import Client

    client = Client(headers={"Authorization": f"Bearer {token}"})

    def post(body: bytes) -> Any:
        return client.post("/api/v1/events", body, content_type="application/json")

    assert post(storebot_batch(13, f"warm-{os.getpid()}")).status_code == 200
    body = body_of(kind)
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here
    before = _status_kib("VmRSS")
    wall, cpu = time.perf_counter(), time.process_time()
    response = post(body)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    error = response.json().get("error", {}) if response.status_code != 200 else {}
    return {
        "body": kind,
        "bytes": len(body),
        "status": response.status_code,
        "field": error.get("field"),
        "message": error.get("message"),
        "seconds": round(wall, 4),
        "cpu_seconds": round(cpu, 4),
        "growth_kib": _status_kib("VmHWM") - before,
    }


def main(argv: list[str]) -> None:
    database_url, token, kind = argv
    if kind not in BODIES:
        raise SystemExit(f"BODY must be one of {BODIES}")
    os.environ.update(
        DATABASE_URL=database_url,
        DJANGO_SETTINGS_MODULE="sagaboard.config.settings",
        SAGABOARD_DEBUG="0",  # as in production: no query log
        SAGABOARD_SECRET_KEY="batch-cost-only-not-secret-0123456789abcdef",
    )
    import django
    from django.test.utils import setup_test_environment

    django.setup()
    setup_test_environment()  # the test client's host ("testserver") is allowed
    print(json.dumps(measure(token, kind)))


if __name__ == "__main__":
    main(sys.argv[1:])

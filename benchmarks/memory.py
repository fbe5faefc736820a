"""Memory under load: ``python -m benchmarks.memory [--quick] [--sagas N] [--db postgres|sqlite]``.

Starts the production processes on 127.0.0.1 against a throw-away database and a
Redis database index claimed for the run (the broker and the channel layer):

* a web process: uvicorn serving sagaboard (``tests.support.live_server.Server``), DEBUG off;
* a Celery worker (``tests.support.live_server.Worker``, solo pool, with its beat, so the
  sweep runs every 10 s over the growing tables).

Then drives ``--sagas`` sagas (100,000; 5,000 with ``--quick``) through the API:
mirrored sagas of the SDK, posted as batches of events (``POST /api/v1/events``),
and among them one saga in 250 run by sagaboard (the manual flow: two steps with
server-side undos, a failed step, ``rollback``), whose undos the worker runs. Once
the worker has rolled back every one of those, the figure is each process's peak
resident memory (``VmHWM`` in ``/proc/<pid>/status``), in MiB.

Each run is a fresh stack (2 runs by default, 3 with ``--quick``); posting stops at
``--max-seconds`` (200 s, quick 60 s) and the figures' note says how many sagas got in.

The floor is the same process's resident memory right after start-up, idle
(``VmRSS`` once it answers, or once the worker logged ``ready``): the ratio is
how much a process grew under the load, whatever the machine's baseline.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks import report
from tests.support.live_server import (
    EventRecorder,
    Server,
    Worker,
    prepare,
    redis_scratch,
    temp_database,
)
from undo_core import Saga, define_tool
from undo_core.remote import SagaboardClient

SERVER_EVERY = 250  # one saga in this many is run by sagaboard (its undos by the worker)
BATCH_SAGAS = 250  # mirrored sagas per POST (4 events each: 1,000, the API's default maximum)
CLIENTS = 2  # posting threads
TOOL = define_tool("reserve_stock", lambda given: {"reserved": given}, lambda out, given: None)


def main(argv: list[str] | None = None) -> None:
    parser = report.cli((__doc__ or "").splitlines()[0])
    parser.add_argument("--sagas", type=int, default=0, help="default 100,000 (quick 5,000)")
    parser.add_argument("--db", default="postgres", choices=["postgres", "sqlite"])
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=0,
        help="bound on one run's posting (default 200, quick 60)",
    )
    # Each run is a whole fresh stack and load (minutes at 100k): 2 runs in full mode, 3 quick.
    parser.set_defaults(runs=0)
    args = parser.parse_args(argv)
    args.runs = args.runs or (3 if args.quick else 2)
    sagas = args.sagas or (5_000 if args.quick else 100_000)
    bound = args.max_seconds or (60.0 if args.quick else 200.0)
    runs: list[dict[str, float]] = [one_run(args.db, sagas, bound) for _ in range(args.runs)]
    report.emit(figures(runs, sagas, args.db), args.json)


def figures(runs: list[dict[str, float]], sagas: int, db: str) -> list[report.Figure]:
    loads = ", ".join(
        f"{r['posted']:,.0f} sagas ({r['served']:.0f} rolled back by the worker) in "
        f"{r['seconds']:.0f} s"
        for r in runs
    )
    common = f"{sagas:,} sagas asked for, through the API on {db}; per run: {loads}"
    return [
        report.Figure(
            key=f"memory.{process}.peak",
            group="Memory",
            label=label,
            unit="MiB",
            samples=[r[f"{process}_peak"] for r in runs],
            floor_label="the same process idle, right after start-up",
            floor_samples=[r[f"{process}_idle"] for r in runs],
            note=common,
        )
        for process, label in (
            ("web", "web process (uvicorn) peak RSS"),
            ("worker", "Celery worker (solo pool, beat) peak RSS"),
        )
    ]


def status_mib(pid: int, field: str) -> float:
    """``VmHWM`` (peak) or ``VmRSS`` (now) of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} for pid {pid}")


def one_run(db: str, sagas: int, bound: float) -> dict[str, float]:
    set_up = time.monotonic()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        url = stack.enter_context(temp_database(db, tmp))
        redis_url = stack.enter_context(redis_scratch())
        token = prepare(url)
        env = {
            "REDIS_URL": redis_url,
            "SAGABOARD_REDIS_PREFIX": f"bench-memory-{os.getpid()}",
            "SAGABOARD_SECRET_KEY": "bench-only-not-secret-0123456789abcdef",
        }
        server = Server(url, env=env)
        server.start()
        stack.callback(server.stop)
        worker_env = {
            **os.environ,
            **env,
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "sagaboard.config.settings",
            "SAGABOARD_DEBUG": "0",
        }
        worker = Worker("memory", worker_env, tmp, beat=True)
        stack.callback(worker.stop)
        worker.wait_ready()
        time.sleep(2.0)  # settled: imports done, first heartbeat written
        assert server.proc is not None
        web_pid, worker_pid = server.proc.pid, worker.pid
        idle = {
            "web_idle": status_mib(web_pid, "VmRSS"),
            "worker_idle": status_mib(worker_pid, "VmRSS"),
        }
        began = time.monotonic()
        posted, served = drive(server.url, token, sagas, deadline=began + bound)
        wait_rolled_back(server.url, token, served, began + bound + 60, worker)
        seconds = time.monotonic() - began
        result = {
            **idle,
            "seconds": seconds,
            "posted": posted,
            "served": served,
            "web_peak": status_mib(web_pid, "VmHWM"),
            "worker_peak": status_mib(worker_pid, "VmHWM"),
        }
        print(
            f"run: {posted:,} sagas ({served} rolled back by the worker) in {seconds:.0f} s "
            f"(set-up {began - set_up:.0f} s); web {result['web_idle']:.0f} -> "
            f"{result['web_peak']:.0f} MiB, worker {result['worker_idle']:.0f} -> "
            f"{result['worker_peak']:.0f} MiB",
            flush=True,
        )
        return result


def mirrored_batches(first: int, end: int) -> Iterator[list[dict[str, Any]]]:
    """The events of mirrored sagas ``first``..``end``, a batch of whole sagas at a time."""
    for start in range(first, end, BATCH_SAGAS):
        recorder = EventRecorder()
        for n in range(start, min(end, start + BATCH_SAGAS)):
            saga = Saga(f"mirrored {n}", store=recorder, saga_id=f"m-{n:07d}")
            saga.execute(TOOL, {"sku": n})
            saga.complete()
        yield recorder.events


def drive(url: str, token: str, sagas: int, *, deadline: float) -> tuple[int, int]:
    """Post the sagas, ``CLIENTS`` threads each with its own share, until done or the deadline.

    Returns how many sagas were posted and how many of them the worker is to roll back.
    """

    def lane(k: int) -> tuple[int, int]:
        share = range(k * sagas // CLIENTS, (k + 1) * sagas // CLIENTS)
        posted = served = 0
        with SagaboardClient(url, token, timeout=60, retries=4) as client:
            for start in range(share.start, share.stop, BATCH_SAGAS):
                if time.monotonic() > deadline:
                    break
                end = min(share.stop, start + BATCH_SAGAS)
                for events in mirrored_batches(start, end):
                    client.send_events(events)
                for n in range(start, end):
                    if n % SERVER_EVERY == 0:
                        server_saga(client, f"s-{n:07d}")
                        served += 1
                posted += end - start
        return posted, served

    with ThreadPoolExecutor(CLIENTS) as pool:
        done = list(pool.map(lane, range(CLIENTS)))
    return sum(p for p, _ in done), sum(s for _, s in done)


def server_saga(client: SagaboardClient, sid: str) -> None:
    """The manual flow: sagaboard records the steps, its worker runs the undos."""
    client.begin("memory-server", saga_id=sid)
    for tool, handler, given in (
        ("return_item", "storebot.return_item", {"itemId": sid}),
        ("refund_payment", "storebot.refund_payment", {"chargeId": sid}),
    ):
        undo = {"kind": "handler", "handler": handler, "args": {}}
        step = client.add_step(sid, tool, given, undo=undo)
        client.complete_step(sid, step["id"], {"ref": f"{tool}-{sid}"})
    label = client.add_step(sid, "generate_label", {"orderId": sid})
    client.fail_step(sid, label["id"], "carrier API returned 500")
    client.rollback(sid, reason="shipping failed")


def wait_rolled_back(url: str, token: str, count: int, deadline: float, worker: Worker) -> None:
    """Until the worker has rolled back every server-run saga (bounded in time)."""
    with SagaboardClient(url, token, timeout=30) as client:
        while True:
            worker.check_alive()
            done = sum(1 for _ in client.list_sagas(status="ROLLED_BACK", limit=200))
            if done >= count:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the worker rolled back {done} of {count} sagas in time")
            time.sleep(1.0)


if __name__ == "__main__":
    main()

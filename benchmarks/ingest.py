"""Ingestion throughput: ``python -m benchmarks.ingest [--sagas N] [--db sqlite,postgres]``.

Starts a real sagaboard (uvicorn, 127.0.0.1, a throw-away database) per database
and measures, in the same run:

* floor: a minimal Django view doing one INSERT per request (``benchmarks/urls.py``);
* single events: ``POST /api/v1/events`` with one transition per request;
* batch: the same endpoint, 100 events per request;
* SDK: sagas of 5 steps run locally with ``SagaboardStore``, until every event is stored.

Prints events/s and p50/p99 latency per request, each as a ratio to the floor.
Every loop is bounded by count and by ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from benchmarks.live import Server, prepare, temp_database
from undo_core import MemoryStore, Saga, SagaChange, define_tool
from undo_core.remote import SagaboardStore, change_to_event

STEPS = 5
TOOLS = [define_tool(f"tool_{n}", lambda i: {"ok": i}, lambda o, i: None) for n in range(STEPS)]


class _Recorder(MemoryStore):
    def __init__(self) -> None:
        super().__init__(keep_events=False)
        self.events: list[dict[str, Any]] = []

    def apply(self, change: SagaChange) -> None:
        super().apply(change)
        self.events.append(change_to_event(change))


def run_sagas(store: Any, count: int) -> None:
    for n in range(count):
        saga = Saga(f"bench-{n}", store=store)
        for tool in TOOLS:
            saga.execute(tool, {"n": n})
        saga.complete()


def make_events(count: int) -> list[dict[str, Any]]:
    recorder = _Recorder()
    run_sagas(recorder, count)
    return recorder.events


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def lanes(events: list[dict[str, Any]], threads: int, per_request: int) -> list[list[bytes]]:
    """Split events into one ordered lane per client thread, whole sagas to one lane.

    A saga's events must arrive in order, so a saga never spans two lanes.
    """
    by_saga: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_saga.setdefault(event["saga"]["id"], []).append(event)
    lanes: list[list[dict[str, Any]]] = [[] for _ in range(threads)]
    for n, saga_events in enumerate(by_saga.values()):
        lanes[n % threads].extend(saga_events)
    return [
        [json.dumps({"events": lane[i : i + per_request]}).encode()
         for i in range(0, len(lane), per_request)]
        for lane in lanes
    ]  # fmt: skip


def timed_posts(
    url: str, token: str, bodies: list[list[bytes]], max_seconds: float
) -> tuple[float, list[float], int]:
    """POST each lane's bodies in order, a thread per lane: (elapsed, latencies, requests)."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    deadline = time.monotonic() + max_seconds
    latencies: list[float] = []
    threads = len(bodies)
    clients = [httpx.Client(headers=headers, timeout=30) for _ in range(threads)]

    def worker(k: int) -> None:
        client = clients[k]
        for body in bodies[k]:
            if time.monotonic() > deadline:
                return
            started = time.perf_counter()
            response = client.post(url, content=body)
            latencies.append(time.perf_counter() - started)
            if response.status_code != 200:
                raise RuntimeError(f"{url}: {response.status_code} {response.text[:300]}")

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(worker, range(threads)))
    elapsed = time.perf_counter() - started
    for client in clients:
        client.close()
    return elapsed, latencies, len(latencies)


def measure(kind: str, sagas: int, threads: int, max_seconds: float) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    with tempfile.TemporaryDirectory() as tmp, temp_database(kind, Path(tmp)) as db_url:
        token = prepare(db_url)
        with Server(db_url, settings="benchmarks.settings") as server:
            events = make_events(sagas)
            floor_lanes = [
                [json.dumps(e).encode() for e in events[k::threads]] for k in range(threads)
            ]
            api = f"{server.url}/api/v1/events"

            def report(label: str, result: tuple[float, list[float], int], per: int) -> float:
                elapsed, lat, done = result
                rate = done * per / elapsed
                rows.append((kind, label, rate, pct(lat, 0.5) * 1e3, pct(lat, 0.99) * 1e3))
                return rate

            floor_url = f"{server.url}/bench/floor"
            httpx.post(floor_url, content=b"{}", timeout=30).raise_for_status()  # creates its table
            floor = report(
                "floor: 1 INSERT per request",
                timed_posts(floor_url, token, floor_lanes, max_seconds),
                1,
            )
            singles = lanes(events, threads, 1)
            report("single event per request", timed_posts(api, token, singles, max_seconds), 1)
            # Fresh sagas for the batch run: the singles already stored theirs.
            batches = lanes(make_events(sagas), threads, 100)
            report("batch of 100 events", timed_posts(api, token, batches, max_seconds), 100)

            sdk_rate, sdk_events = sdk_run(server.url, token, sagas, max_seconds)
            rows.append((kind, f"SDK end to end ({sdk_events} events)", sdk_rate, None, None))
            rows.append((kind, "__floor__", floor, None, None))
    return rows


def sdk_run(url: str, token: str, sagas: int, max_seconds: float) -> tuple[float, int]:
    store = SagaboardStore(url, token, batch_size=500, flush_interval=0.005)
    started = time.perf_counter()
    run_sagas(store, sagas)
    delivered = store.flush(timeout=max_seconds)
    elapsed = time.perf_counter() - started
    stats = store.stats()
    store.close(timeout=10)
    if not delivered:
        print(f"  SDK: not everything was delivered within {max_seconds:g} s: {stats}")
    return stats["sent"] / elapsed, stats["sent"]


def _ms(value: float | None) -> str:
    return " " * 8 if value is None else f"{value:8.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sagas", type=int, default=10_000, help="sagas per run (5 steps each)")
    parser.add_argument("--db", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--threads", type=int, default=4, help="concurrent HTTP clients")
    parser.add_argument("--max-seconds", type=float, default=120, help="bound per measurement")
    args = parser.parse_args(argv)
    print(f"ingestion benchmark: {args.sagas} sagas x {STEPS} steps, {args.threads} clients")
    print(f"{'db':<9} {'figure':<34} {'events/s':>10} {'p50 ms':>8} {'p99 ms':>8}  vs floor")
    for kind in [k.strip() for k in args.db.split(",") if k.strip()]:
        rows = measure(kind, args.sagas, args.threads, args.max_seconds)
        floor = next(r[2] for r in rows if r[1] == "__floor__")
        for db, label, rate, p50, p99 in rows:
            if label == "__floor__":
                continue
            ratio = rate / floor
            print(f"{db:<9} {label:<34} {rate:>10,.0f} {_ms(p50)} {_ms(p99)}  {ratio:.2f}x")


if __name__ == "__main__":
    main()

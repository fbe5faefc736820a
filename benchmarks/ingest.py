"""Ingestion throughput: ``python -m benchmarks.ingest [--runs N] [--quick] [--db sqlite]``.

Starts real sagaboard servers per database (127.0.0.1, a throw-away database), served
as the Procfile's ``web`` is in production: gunicorn, WSGI, ``sagaboard/config/gunicorn.py``
(gthread workers), one worker per server; measures with one and with two web processes
on that database (client threads split between them), in every run:

* single events: ``POST /api/v1/events`` with one transition per request;
* batch: the same endpoint, 100 events per request;
* SDK: sagas of 5 steps run locally, mirrored by ``SagaboardStore`` (one store
  per web process), until every event is acknowledged.

The floor of each figure is ``/bench/floor`` (``benchmarks/urls.py``) on the same
servers in the same run: the plainest Django view that stores an event, one
INSERT in one transaction per request, behind the same ASGI server, middleware
and database settings. It is what any "store this event" endpoint costs before
doing anything of its own, so the ratio is the share of Django's own request
cost that sagaboard keeps; batch and SDK figures are compared per event with
it (how much batching buys). Events/s count client-side acknowledged events.

The floors a Django user would pick (issue 19), in the same runs: a plain django-ninja
sync endpoint doing one ORM insert of the event (``/bench/plain/event``) and one doing
``bulk_create`` of a batch of 100 (``/bench/plain/events``), served the usual way,
gunicorn's sync worker, with one and with two worker processes (two servers of one
worker each, like the web processes). Those ratios are ``ingest.*.single_plain.*`` and
``ingest.*.batch_plain.*``; the SDK figure with two web processes carries the issue's
value aim.

``--servers uvicorn,gunicorn-sync,gunicorn-gthread,granian`` instead compares the ways
to serve the same code (one process each, same database, interleaved runs) and prints
each one's single-event and batch rates, and ratios to gunicorn's sync worker: the
evidence behind the production choice (benchmarks/commentary.md, "Serving").

Each figure's note gives the CPU spent per event by the client process and by
the web processes, so a reader can tell which side limits the figure (on a
2-CPU machine the client and the servers share the CPUs).
Every loop is bounded by count and by time.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks import report
from tests.support.live_server import EventRecorder, Server, prepare, temp_database
from undo_core import Saga, define_tool
from undo_core.remote import SagaboardStore

STEPS = 5
PER_BATCH = 100
THREADS = 4
TOOLS = [define_tool(f"tool_{n}", lambda i: {"ok": i}, lambda o, i: None) for n in range(STEPS)]
AIM_SINGLE = report.Aim("single-event ingestion >= 60% of the floor", "ratio", ">=", 0.6)
AIM_SINGLE_PLAIN = report.Aim(
    "single-event ingestion >= 1.2x a plain ninja ORM-insert endpoint", "ratio", ">=", 1.2
)
AIM_BATCH_PLAIN = report.Aim(
    "batches >= 1.0x a plain ninja bulk_create endpoint", "ratio", ">=", 1.0
)
AIM_SDK = {
    "sqlite": report.Aim("SDK end to end >= 20,000 events/s on SQLite", "value", ">=", 20_000),
    "postgres": report.Aim(
        "SDK end to end >= 10,000 events/s on PostgreSQL", "value", ">=", 10_000
    ),
}
WEB = {"server": "gunicorn", "worker_class": "gthread"}
"""The production web process (Procfile ``web``, sagaboard/config/gunicorn.py)."""
PLAIN = {"server": "gunicorn", "worker_class": "sync", "threads": 1}
"""How a Django user serves a plain sync endpoint."""
SERVER_OPTIONS: dict[str, dict[str, Any]] = {
    "uvicorn": {"server": "uvicorn"},
    # threads=1: gunicorn turns a "sync" worker with more threads into gthread.
    "gunicorn-sync": {"server": "gunicorn", "worker_class": "sync", "threads": 1},
    "gunicorn-gthread": {"server": "gunicorn", "worker_class": "gthread"},
    "granian": {"server": "granian", "threads": 1},
}
AIM_BATCH = {
    "sqlite": report.Aim("batch >= 5,000 events/s on SQLite", "value", ">=", 5000),
    "postgres": report.Aim("batch >= 10,000 events/s on PostgreSQL", "value", ">=", 10_000),
}


@dataclass(frozen=True)
class Sizes:
    """How much one measurement may do: a count bound and a time bound."""

    single_events: int
    batch_events: int
    sdk_sagas: int
    seconds: float


FULL = Sizes(single_events=3000, batch_events=40_000, sdk_sagas=2000, seconds=5.0)
QUICK = Sizes(single_events=400, batch_events=5000, sdk_sagas=100, seconds=0.8)


def run_sagas(store: Any, count: int, deadline: float = float("inf")) -> None:
    for n in range(count):
        if time.monotonic() > deadline:
            return
        saga = Saga(f"bench-{n}", store=store)
        for tool in TOOLS:
            saga.execute(tool, {"n": n})
        saga.complete()


def make_events(count: int) -> list[dict[str, Any]]:
    """At least ``count`` events of fresh sagas (whole sagas, in order), as the SDK sends them."""
    recorder = EventRecorder()
    run_sagas(recorder, -(-count // (2 + 2 * STEPS)))
    return recorder.events


def saga_texts(count: int) -> list[list[str]]:
    """At least ``count`` events as JSON text, one list per saga, each saga a fresh id.

    One saga is run by the engine; the others are its copies under new ids (running
    thousands of sagas would cost the client more time than the measurement).
    """
    template = make_events(1)
    old = template[0]["saga"]["id"]
    texts = [json.dumps(e) for e in template]
    return [
        [t.replace(old, new) for t in texts]
        for new in (str(uuid.uuid4()) for _ in range(-(-count // len(texts))))
    ]


def lanes(sagas: list[list[str]], threads: int, per_request: int) -> list[list[bytes]]:
    """Split events into one ordered lane per client thread, whole sagas to one lane.

    A saga's events must arrive in order, so a saga never spans two lanes.
    ``per_request`` 0 sends each event bare (the floor's body).
    """
    split: list[list[str]] = [[] for _ in range(threads)]
    for n, events in enumerate(sagas):
        split[n % threads].extend(events)
    if per_request == 0:
        return [[e.encode() for e in lane] for lane in split]
    return [
        [('{"events": [' + ", ".join(lane[i : i + per_request]) + "]}").encode()
         for i in range(0, len(lane), per_request)]
        for lane in split
    ]  # fmt: skip


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    """One measurement: events acknowledged per second, and where the CPU went."""

    rate: float
    client_us: float  # client-process CPU per event
    server_us: float  # web-process CPU per event, all web processes together


@contextmanager
def _cpu_meter(servers: list[Server]) -> Iterator[Callable[[int, float], Sample]]:
    pids = [pid for s in servers for pid in s.pids()]
    client0, server0 = time.process_time(), sum(_cpu_seconds(p) for p in pids)

    def done(events: int, elapsed: float) -> Sample:
        client = time.process_time() - client0
        server = sum(_cpu_seconds(p) for p in pids) - server0
        n = max(events, 1)
        return Sample(events / elapsed, client / n * 1e6, server / n * 1e6)

    yield done


def timed_posts(
    urls: list[str], token: str, bodies: list[list[bytes]], per: int, seconds: float,
    servers: list[Server],
) -> Sample:  # fmt: skip
    """POST each lane's bodies in order, a thread per lane, lane k to ``urls[k % len]``."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    deadline = time.monotonic() + seconds
    sent = [0] * len(bodies)
    clients = [httpx.Client(headers=headers, timeout=30, trust_env=False) for _ in bodies]

    def worker(k: int) -> None:
        url = urls[k % len(urls)]
        for n, body in enumerate(bodies[k]):
            if n and time.monotonic() > deadline:  # every lane sends at least one body
                return
            response = clients[k].post(url, content=body)
            if response.status_code != 200:
                raise RuntimeError(f"{url}: {response.status_code} {response.text[:300]}")
            sent[k] += 1

    try:
        with _cpu_meter(servers) as meter:
            started = time.perf_counter()
            with ThreadPoolExecutor(len(bodies)) as pool:
                list(pool.map(worker, range(len(bodies))))
            elapsed = time.perf_counter() - started
            if per == PER_BATCH:  # the last body of a lane may be short
                done = sum(_events_in(bodies[k][:n]) for k, n in enumerate(sent))
            else:
                done = sum(sent)
            return meter(done, elapsed)
    finally:
        for client in clients:
            client.close()


def _events_in(bodies: list[bytes]) -> int:
    return sum(len(json.loads(b)["events"]) for b in bodies)


def sdk_run(servers: list[Server], token: str, sagas: int, seconds: float) -> Sample:
    """Sagas run locally, one thread and one store per web process, until all is acknowledged."""
    stores = [SagaboardStore(s.url, token, batch_size=500, flush_interval=0.005) for s in servers]
    deadline = time.monotonic() + seconds

    def agent(k: int) -> None:
        run_sagas(stores[k], sagas // len(stores), deadline)
        stores[k].flush(timeout=max(0.1, deadline + seconds - time.monotonic()))

    with _cpu_meter(servers) as meter:
        started = time.perf_counter()
        threads = [threading.Thread(target=agent, args=(k,)) for k in range(len(stores))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        sent = sum(store.stats()["sent"] for store in stores)
        sample = meter(sent, elapsed)
    for store in stores:
        pending = store.stats()
        store.close(timeout=10)
        if pending.get("queued"):
            print(f"  SDK: not everything was delivered in time: {pending}")
    return sample


@dataclass
class Series:
    """The samples of one (database, web processes) pair, by figure."""

    floor: list[Sample] = field(default_factory=list)
    single: list[Sample] = field(default_factory=list)
    batch: list[Sample] = field(default_factory=list)
    sdk: list[Sample] = field(default_factory=list)
    plain_single: list[Sample] = field(default_factory=list)
    plain_batch: list[Sample] = field(default_factory=list)


def measure_run(
    servers: list[Server], token: str, sizes: Sizes, series: Series, plain: list[Server]
) -> None:
    """One run: the floors and every figure, back to back on the same servers."""
    api = [f"{s.url}/api/v1/events" for s in servers]
    floor = [f"{s.url}/bench/floor" for s in servers]
    singles = saga_texts(sizes.single_events)
    series.floor.append(
        timed_posts(floor, "", lanes(singles, THREADS, 0), 1, sizes.seconds, servers)
    )
    if plain:
        one = [f"{s.url}/bench/plain/event" for s in plain]
        series.plain_single.append(
            timed_posts(one, "", lanes(singles, THREADS, 0), 1, sizes.seconds, plain)
        )
    series.single.append(
        timed_posts(api, token, lanes(singles, THREADS, 1), 1, sizes.seconds, servers)
    )
    batches = lanes(saga_texts(sizes.batch_events), THREADS, PER_BATCH)
    if plain:
        many = [f"{s.url}/bench/plain/events" for s in plain]
        series.plain_batch.append(timed_posts(many, "", batches, PER_BATCH, sizes.seconds, plain))
    series.batch.append(timed_posts(api, token, batches, PER_BATCH, sizes.seconds, servers))
    series.sdk.append(sdk_run(servers, token, sizes.sdk_sagas, sizes.seconds))


def _warm_up(servers: list[Server], token: str) -> None:
    """First requests import and connect; keep that out of every figure.

    Several requests per server: gunicorn and granian hand each connection to any of
    their workers or threads, each of which imports and connects on its first request.
    """
    for server in servers:
        with httpx.Client(timeout=30, trust_env=False) as http:
            for _ in range(8):
                http.post(f"{server.url}/bench/floor", content=b"{}").raise_for_status()
            if token:
                auth = {"Authorization": f"Bearer {token}"}
                body = {"events": make_events(1)}
                http.post(f"{server.url}/api/v1/events", json=body, headers=auth).raise_for_status()
            else:  # a plain server: its endpoints once (the event under a new id each time)
                for events in saga_texts(4)[:4]:
                    http.post(f"{server.url}/bench/plain/event", content=events[0].encode())
                    body = '{"events": [' + ", ".join(events[1:]) + "]}"
                    http.post(f"{server.url}/bench/plain/events", content=body.encode())


def _start_all(stack: ExitStack, servers: list[Server]) -> None:
    """Launch every server at once (Django start-ups overlap), then wait for each."""
    for server in servers:
        stack.callback(server.stop)
        server.launch()
    for server in servers:
        server.wait_ready(timeout=60)


def measure_database(kind: str, runs: int, sizes: Sizes) -> dict[int, Series]:
    """Both web-process counts on one database: web 1 alone, then webs 1 and 2 together."""
    result = {1: Series(), 2: Series()}
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        db_url = stack.enter_context(temp_database(kind, Path(tmp)))
        began = time.monotonic()
        token = prepare(db_url)
        servers = [Server(db_url, settings="benchmarks.settings", **WEB) for _ in range(2)]
        plain = [Server(db_url, settings="benchmarks.settings", **PLAIN) for _ in range(2)]
        _start_all(stack, servers + plain)
        _warm_up(servers, token)
        _warm_up(plain, "")
        print(f"  {kind}: ready in {time.monotonic() - began:.1f} s", file=sys.stderr)
        for _ in range(runs):
            for webs in (1, 2):
                measure_run(servers[:webs], token, sizes, result[webs], plain[:webs])
        print(f"  {kind}: measured in {time.monotonic() - began:.1f} s", file=sys.stderr)
    return result


def compare_servers(kind: str, names: list[str], runs: int, sizes: Sizes) -> None:
    """The same code served each way, one process each, on one database; runs interleaved
    (every server once per run) so that the machine's load falls on all of them alike."""
    unknown = sorted(set(names) - set(SERVER_OPTIONS))
    if unknown:
        raise SystemExit(f"--servers: unknown {unknown}; choose from {sorted(SERVER_OPTIONS)}")
    rates: dict[str, dict[str, list[float]]] = {n: {} for n in names}
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        db_url = stack.enter_context(temp_database(kind, Path(tmp)))
        token = prepare(db_url)
        servers = {
            n: Server(db_url, settings="benchmarks.settings", **SERVER_OPTIONS[n]) for n in names
        }
        _start_all(stack, list(servers.values()))
        for server in servers.values():
            _warm_up([server], token)
            _warm_up([server], "")
        for _ in range(runs):
            floor = lanes(saga_texts(sizes.single_events), THREADS, 0)
            for n, server in servers.items():
                for what, url, tok, per in (
                    ("sagaboard single", "/api/v1/events", token, 1),
                    ("plain single", "/bench/plain/event", "", 1),
                    ("/bench/floor", "/bench/floor", "", 1),
                    ("sagaboard batch", "/api/v1/events", token, PER_BATCH),
                    ("plain batch", "/bench/plain/events", "", PER_BATCH),
                ):
                    # New ids for every server and endpoint: the same events sent to a second
                    # server would be stored duplicates there (answered without the rules'
                    # work), and the plain table takes an id once.
                    bodies = floor
                    if what != "/bench/floor":
                        fresh = saga_texts(sizes.single_events if per == 1 else sizes.batch_events)
                        bare = per == 1 and not what.startswith("sagaboard")
                        bodies = lanes(fresh, THREADS, 0 if bare else per)
                    sample = timed_posts(
                        [server.url + url], tok, bodies, per, sizes.seconds, [server]
                    )
                    rates[n].setdefault(what, []).append(sample.rate)
    base = names[0]
    print(f"\n{kind}: events/s, median of {runs} interleaved runs (ratio to {base})")
    for what in rates[base]:
        cells = []
        for n in names:
            mine = statistics.median(rates[n][what])
            ratio = mine / statistics.median(rates[base][what])
            cells.append(f"{n} {mine:,.0f} ({ratio:.2f}x)")
        print(f"  {what:17} " + " | ".join(cells))


def _note(samples: list[Sample]) -> str:
    client = sorted(s.client_us for s in samples)[len(samples) // 2]
    server = sorted(s.server_us for s in samples)[len(samples) // 2]
    return f"CPU per event: client {client:,.0f} us, web processes {server:,.0f} us"


def figures(kind: str, series: dict[int, Series]) -> list[report.Figure]:
    name = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[kind]
    out = []
    for webs, s in series.items():
        floor = [x.rate for x in s.floor]
        where = f"{name}, {webs} web process{'es' if webs > 1 else ''}"
        plain = f"gunicorn sync, {webs} worker{'s' if webs > 1 else ''}"
        for figure, label, samples, aim in (
            ("single", "single-event POSTs", s.single, AIM_SINGLE),
            ("batch", f"batches of {PER_BATCH} events", s.batch, AIM_BATCH[kind]),
            ("sdk", "SDK end to end (SagaboardStore)", s.sdk, AIM_SDK[kind] if webs == 2 else None),
        ):
            out.append(
                report.Figure(
                    key=f"ingest.{kind}.{figure}.{webs}web",
                    group="Ingestion",
                    label=f"{label}, {where}",
                    unit="events/s",
                    samples=[x.rate for x in samples],
                    better="higher",
                    floor_label="/bench/floor: one INSERT per request, same servers",
                    floor_samples=floor,
                    aim=aim,
                    note=f"{_note(samples)}; floor {_note(s.floor)}",
                )
            )
        for figure, label, samples, floor_samples, floor_label, aim in (
            ("single_plain", "single-event POSTs", s.single, s.plain_single,
             f"plain ninja endpoint, one ORM insert per event, {plain}", AIM_SINGLE_PLAIN),
            ("batch_plain", f"batches of {PER_BATCH} events", s.batch, s.plain_batch,
             f"plain ninja endpoint, bulk_create of {PER_BATCH}, {plain}", AIM_BATCH_PLAIN),
        ):  # fmt: skip
            if not floor_samples:
                continue
            out.append(
                report.Figure(
                    key=f"ingest.{kind}.{figure}.{webs}web",
                    group="Ingestion",
                    label=f"{label} against a plain endpoint, {where}",
                    unit="events/s",
                    samples=[x.rate for x in samples],
                    better="higher",
                    floor_label=floor_label,
                    floor_samples=[x.rate for x in floor_samples],
                    aim=aim,
                    note=f"{_note(samples)}; plain endpoint {_note(floor_samples)}",
                )
            )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = report.cli((__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--db", default="sqlite,postgres",
        help="the databases, comma-separated: sqlite, postgres (default: sqlite,postgres)",
    )  # fmt: skip
    parser.add_argument(
        "--servers", default="",
        help=f"compare ways to serve instead (comma-separated, first is the base): "
        f"{', '.join(SERVER_OPTIONS)}",
    )  # fmt: skip
    parser.set_defaults(runs=3)
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.db.split(",") if k.strip()]
    unknown = sorted(set(kinds) - {"sqlite", "postgres"})
    if unknown or not kinds:
        parser.error(f"--db: sqlite and/or postgres, comma-separated, not {args.db!r}")
    sizes = QUICK if args.quick else FULL
    if args.servers:
        for kind in kinds:
            compare_servers(kind, [n.strip() for n in args.servers.split(",")], args.runs, sizes)
        return
    out: list[report.Figure] = []
    for kind in kinds:
        out += figures(kind, measure_database(kind, args.runs, sizes))
    report.emit(out, args.json)
    for f in out:
        print(f"  {f.key}: {f.note}")


if __name__ == "__main__":
    main()

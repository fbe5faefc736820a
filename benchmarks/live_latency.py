"""Live updates: ``python -m benchmarks.live_latency [--runs N] [--quick] [--json PATH]``.

How long an event the SDK posts takes to reach every browser watching the saga
list, and whether every one arrives while ingestion runs flat out. A real
sagaboard per channel layer:

* in-memory (embedded): a SQLite file, one uvicorn, no Redis;
* Redis (production): a fresh PostgreSQL database, ``REDIS_URL``, two uvicorn
  processes for the websocket clients (split evenly; one relay holds the Redis
  lease) and a third that only takes the POSTs, so every event commits in a
  process that is not the relay's (the relay is woken by the commit's NOTIFY).
  Redis is ``SAGABOARD_BENCH_REDIS_URL`` (default redis://127.0.0.1:6379), on a
  database index claimed for the run (``redis_scratch``).

Clients log in as ``demo`` and open ``/ws/sagas/?list=1``. A writer thread posts
a saga-created event for a NEW saga at a steady rate (``POST /api/v1/events``);
latency is from just BEFORE the request starts (so it includes the request: the
event is accepted inside it) to a client receiving the row naming that saga.
Figures: p50 and p99 over every (client, saga) pair of a run, for 1, 50 and 200
clients; and the same "above the POST": from the POST's answer (the event has
committed by then) to the client receiving it, which is what the relay's wake,
the channel layer, rendering and the websocket add (a pair that arrives before
the answer counts as negative).

Floor: a bare channel-layer round trip of the same layer kind, measured in each
run (``benchmarks/_channel_floor.py``, a process of its own set up like a web
process: one receiver in a group, ``group_send``, time to ``receive``). It is the
one hop every live update must take and the project cannot shorten; the ratio is
what the relay's poll, the database, rendering and the websocket add on top.
p50 is divided by the floor's p50, p99 by its p99.

Delivery under saturation: while the clients watch, a second writer posts
batches of new sagas back to back (as fast as the server answers) next to the
paced writer; the figure is received (client, saga) pairs over expected pairs
after a bounded drain. Channel layers drop messages when a consumer falls behind
(the in-memory layer past its capacity); the consumers refill gaps from the event
log, and this figure proves they end up with every saga (an aim of exactly 1.0).

All clients share one asyncio process; its loop lag is in each figure's note.
Every loop is bounded by count and time, and everything is on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Origin

from benchmarks import report
from tests.support.live_server import (
    ROOT,
    EventRecorder,
    Server,
    load_demo,
    redis_scratch,
    session_cookie,
    temp_database,
)
from undo_core import Saga, define_tool

GROUP = "Live updates"
LAYERS = {"memory": "in-memory layer (SQLite, 1 web process)",
          "redis": "Redis layer (PostgreSQL, 2 web processes, POSTs to a third)"}  # fmt: skip
AIM_P99 = report.Aim("live update p99 < 250 ms at 200 clients", "value", "<=", 250.0)
AIM_ABOVE_P50 = report.Aim("live update p50 <= 10 ms above the POST at 50 clients", "value",
                           "<=", 10.0)  # fmt: skip
AIM_ABOVE_P99 = report.Aim("live update p99 <= 50 ms above the POST at 50 clients", "value",
                           "<=", 50.0)  # fmt: skip
AIM_DELIVERY = report.Aim("delivery exactly 1.0 while ingestion is saturated", "value", ">=", 1.0)
CONNECT_AT_ONCE = 25  # concurrent websocket handshakes while the clients connect
TICK = 0.005  # the client loop's lag probe
FLOOR_ROUND_TRIPS = 1000


@dataclass(frozen=True)
class Plan:
    """The sizes of one invocation: ``--quick`` for CI, the default for the published table."""

    clients: tuple[int, ...]
    events: int  # paced new sagas per latency measurement
    rate: float  # paced sagas per second
    drain: float  # after the writers stop, how long stragglers may take (s)
    flood_clients: int
    flood_seconds: float  # how long the second writer posts back to back
    flood_sagas: int  # ... and at most this many sagas
    flood_batch: int  # new sagas per request
    flood_drain: float


# A flood of S sagas watched by C clients is S x C websocket messages to push (about a
# quarter of a millisecond of server CPU each): sized so the drain stays in seconds.
# Quick (CI) checks the ratios baseline.json holds (1 and 20 clients); the 50-client aims
# are measured by the full run only.
QUICK = Plan((1, 20), 60, 60.0, 10.0, 10, 1.0, 600, 50, 30.0)
FULL = Plan((1, 50, 200), 200, 20.0, 15.0, 20, 3.0, 2000, 100, 90.0)


# -- the site under test ------------------------------------------------------------------


@dataclass
class Site:
    servers: list[Server]  # the websocket clients' (the relays')
    token: str
    database_url: str
    redis_url: str  # "" for the in-memory layer
    poster: Server  # takes the POSTs: one of ``servers``, or (Redis) a process of its own

    @property
    def api(self) -> str:
        return f"{self.poster.url}/api/v1/events"


@contextmanager
def site(layer: str, workdir: Path) -> Iterator[Site]:
    """A running cluster for ``layer``; torn down (servers, database) on exit."""
    production = layer == "redis"
    with ExitStack() as stack:
        url = stack.enter_context(temp_database("postgres" if production else "sqlite", workdir))
        token = load_demo(url, token=True)
        # An empty REDIS_URL keeps the embedded server off Redis even if the shell has one.
        redis_url = stack.enter_context(redis_scratch()) if production else ""
        servers = [Server(url, env={"REDIS_URL": redis_url}) for _ in range(3 if production else 1)]
        try:
            for server in servers:
                server.start()
            # Production: the third process has no sockets, so no relay: every event is
            # committed away from the relay, which only the commit's NOTIFY wakes.
            yield Site(servers[:2] if production else servers, token, url, redis_url, servers[-1])
        finally:
            for server in servers:
                server.stop()


class ChannelFloor:
    """A process measuring a bare ``group_send`` round trip on a site's layer kind, on demand.

    Set up like a web process of the site (same settings, same ``REDIS_URL``), so
    the floor is the very layer the live updates go through (``_channel_floor``).
    """

    def __init__(self, the_site: Site) -> None:
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {
            **os.environ,
            "PYTHONPATH": path,
            "DJANGO_SETTINGS_MODULE": "sagaboard.config.settings",
            "SAGABOARD_DEBUG": "1",  # settings without a secret key; the layer is the same
            "DATABASE_URL": the_site.database_url,
            "REDIS_URL": the_site.redis_url,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks._channel_floor"],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def measure(self) -> tuple[float, float]:
        """(p50, p99) ms now; the child bounds itself (10 s, 5 s a message)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{FLOOR_ROUND_TRIPS}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the floor process exited with code {self.proc.wait(10)}")
        found = json.loads(line)
        return float(found["p50"]), float(found["p99"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


# -- browsers -----------------------------------------------------------------------------


@dataclass
class Client:
    """One browser tab on the saga list: when each saga id first arrived, and repeats."""

    base: str
    cookie: str
    pattern: re.Pattern[str]
    received: dict[str, float] = field(default_factory=dict)
    duplicates: int = 0
    ws: ClientConnection | None = None

    async def open(self) -> None:
        url = self.base.replace("http://", "ws://") + "/ws/sagas/?list=1"
        self.ws = await connect(
            url,
            origin=Origin(self.base),
            additional_headers={"Cookie": self.cookie},
            open_timeout=30,
            proxy=None,
            max_size=None,
            compression=None,
        )

    async def listen(self) -> None:
        assert self.ws is not None
        async for message in self.ws:
            now = time.perf_counter()
            for saga_id in set(self.pattern.findall(str(message))):
                if saga_id in self.received:
                    self.duplicates += 1
                else:
                    self.received[saga_id] = now


async def open_clients(clients: list[Client]) -> None:
    """Open every socket, a few handshakes at a time (as tabs open, not all in one tick)."""
    gate = asyncio.Semaphore(CONNECT_AT_ONCE)

    async def one(client: Client) -> None:
        async with gate:
            await client.open()

    await asyncio.wait_for(asyncio.gather(*(one(c) for c in clients)), timeout=120)


async def loop_lag(samples: list[float], stop: asyncio.Event) -> None:
    """How late this process's event loop wakes up: the clients' own share of latency."""
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(TICK)
        samples.append(time.perf_counter() - started - TICK)


# -- the writers --------------------------------------------------------------------------


_TOOL = define_tool("reserve_stock", lambda i: {"ok": True}, lambda o, i: None)


def saga_started(saga_id: str) -> dict[str, Any]:
    """The SDK's first event for a new saga (kind "saga", from_state null)."""
    recorder = EventRecorder()
    Saga("live-latency", store=recorder, saga_id=saga_id).execute(_TOOL, {})
    return recorder.events[0]


@dataclass
class Writer:
    """Posts new sagas from its own thread, so the clients' loop never waits for it.

    Paced (``rate`` requests per second: the latency tracer) or back to back
    (``rate`` None: saturating ingestion), for at most ``seconds``.
    """

    api: str
    token: str
    batches: list[list[str]]  # the saga ids of each request
    rate: float | None
    seconds: float = 3600.0
    posted: dict[str, float] = field(default_factory=dict)
    answered: dict[str, float] = field(default_factory=dict)
    request_seconds: list[float] = field(default_factory=list)
    error: BaseException | None = None
    bodies: list[bytes] = field(init=False)

    def __post_init__(self) -> None:  # built before the clock starts
        self.bodies = [
            json.dumps({"events": [saga_started(s) for s in ids]}).encode() for ids in self.batches
        ]

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        try:
            with httpx.Client(headers=headers, timeout=30, trust_env=False) as http:
                started = time.perf_counter()
                for n, (ids, body) in enumerate(zip(self.batches, self.bodies, strict=True)):
                    if self.rate is not None:
                        time.sleep(max(0.0, started + n / self.rate - time.perf_counter()))
                    before = time.perf_counter()
                    if before - started > self.seconds:
                        return
                    self.posted.update(dict.fromkeys(ids, before))  # an upper bound
                    answer = http.post(self.api, content=body)
                    after = time.perf_counter()
                    self.request_seconds.append(after - before)
                    self.answered.update(dict.fromkeys(ids, after))
                    answer.raise_for_status()
                    statuses = {r["status"] for r in answer.json()["results"]}
                    if statuses != {"applied"}:
                        raise RuntimeError(f"{ids[0]}...: {answer.text[:200]}")
        except BaseException as err:  # reported by the measuring loop
            self.error = err

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, daemon=True)
        thread.start()
        return thread


# -- one measurement ----------------------------------------------------------------------


@dataclass
class Result:
    latencies_ms: list[float]  # every (client, saga) pair received, paced writer's sagas
    above_post_ms: list[float]  # the same pairs, from the POST's answer
    received: int  # (client, saga) pairs received, all writers
    expected: int
    duplicates: int
    request_ms: list[float]  # the paced writer's POSTs
    lag_ms: list[float]
    flood_sagas: int = 0
    flood_seconds: float = 0.0
    drained_s: float = 0.0  # from the writers' end to the last delivery (or the bound)

    @property
    def delivery(self) -> float:
        return self.received / self.expected if self.expected else 0.0


async def measure(
    the_site: Site, cookies: dict[str, str], clients: int, plan: Plan, *, flood: bool
) -> Result:
    """Connect ``clients`` tabs, post (and flood, if asked), wait until all arrive or the drain."""
    run = uuid.uuid4().hex[:8]
    pattern = re.compile(rf"\b(?:lat|sat)-{run}-\d+\b")
    bases = [the_site.servers[n % len(the_site.servers)].url for n in range(clients)]
    tabs = [Client(base, cookies[base], pattern) for base in bases]
    await open_clients(tabs)
    listeners = [asyncio.create_task(t.listen()) for t in tabs]
    lag: list[float] = []
    stop = asyncio.Event()
    prober = asyncio.create_task(loop_lag(lag, stop))
    await asyncio.sleep(0.5)  # let every consumer finish its connect-time catch-up
    if flood:
        seconds, events = plan.flood_seconds, max(1, int(plan.flood_seconds * plan.rate))
    else:  # a busy server answers slower than the pace: then fewer sagas, not a longer run
        seconds, events = 2 * plan.events / plan.rate, plan.events
    tracer = Writer(the_site.api, the_site.token, [[f"lat-{run}-{n}"] for n in range(events)],
                    plan.rate, seconds)  # fmt: skip
    writers = [tracer]
    if flood:
        ids = [f"sat-{run}-{n}" for n in range(plan.flood_sagas)]
        chunks = [ids[i : i + plan.flood_batch] for i in range(0, len(ids), plan.flood_batch)]
        writers.append(Writer(the_site.api, the_site.token, chunks, None, plan.flood_seconds))
    try:
        threads = [w.start() for w in writers]
        bound = events / plan.rate + (plan.flood_drain if flood else plan.drain) + 30
        drained = await wait_for_delivery(tabs, writers, threads, plan, flood, bound)
    finally:
        stop.set()
        for task in [*listeners, prober]:
            task.cancel()
        await asyncio.gather(*listeners, prober, return_exceptions=True)
        await asyncio.gather(*(t.ws.close() for t in tabs if t.ws), return_exceptions=True)
    for w in writers:
        if w.error is not None:
            raise RuntimeError(f"a writer failed: {w.error!r}") from w.error
    posted = {s: at for w in writers for s, at in w.posted.items()}
    flooder = writers[-1] if flood else None
    return Result(
        [1e3 * (at - tracer.posted[s]) for t in tabs for s, at in t.received.items()
         if s in tracer.posted],
        [1e3 * (at - tracer.answered[s]) for t in tabs for s, at in t.received.items()
         if s in tracer.answered],
        sum(len(posted.keys() & t.received.keys()) for t in tabs),
        clients * len(posted),
        sum(t.duplicates for t in tabs),
        [1e3 * s for s in tracer.request_seconds],
        [1e3 * s for s in lag],
        len(flooder.posted) if flooder else 0,
        sum(flooder.request_seconds) if flooder else 0.0,
        drained,
    )  # fmt: skip


async def wait_for_delivery(
    tabs: list[Client],
    writers: list[Writer],
    threads: list[threading.Thread],
    plan: Plan,
    flood: bool,
    bound: float,
) -> float:
    """Until every tab has every posted saga, or the drain time after the writers end.

    Returns the seconds from the writers' end to the last tab complete (or the bound).
    """
    deadline = time.monotonic() + bound
    ended: float | None = None
    while time.monotonic() < deadline:
        if ended is None and not any(t.is_alive() for t in threads):
            ended = time.monotonic()
        if ended is not None:
            wanted = sum(len(w.posted) for w in writers)
            drain = plan.flood_drain if flood else plan.drain
            if all(len(t.received) >= wanted for t in tabs) or time.monotonic() > ended + drain:
                return time.monotonic() - ended
        await asyncio.sleep(0.05)
    return float("nan")


# -- figures ------------------------------------------------------------------------------


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def latency_note(results: list[Result], plan: Plan) -> str:
    post = statistics.median(pct(r.request_ms, 0.99) for r in results)
    lag = max(pct(r.lag_ms, 0.99) for r in results)
    worst = min(r.delivery for r in results)
    dups = sum(r.duplicates for r in results)
    return (
        f"{plan.events} new sagas at {plan.rate:g}/s per run; latency includes the POST "
        f"(p99 {post:.0f} ms); delivered {worst:.4f} (worst run), {dups} duplicates; "
        f"client loop lag p99 {lag:.1f} ms"
    )


def flood_note(results: list[Result], plan: Plan) -> str:
    rates = [r.flood_sagas / r.flood_seconds for r in results if r.flood_seconds]
    complete = [r.drained_s for r in results if r.received == r.expected]
    if len(complete) == len(results):
        ending = f"every run complete {max(complete):.1f} s after the writers stopped (slowest)"
    else:
        ending = (
            f"{len(results) - len(complete)} of {len(results)} runs still incomplete "
            f"{plan.flood_drain:g} s after the writers stopped"
        )
    return (
        f"a second writer posted {statistics.median(r.flood_sagas for r in results):.0f} new "
        f"sagas, {plan.flood_batch} a request, back to back for {plan.flood_seconds:g} s "
        f"(median {statistics.median(rates or [0]):.0f} sagas/s accepted) beside the paced "
        f"writer; {ending}; {sum(r.duplicates for r in results)} duplicates"
    )


def progress(layer: str, run: int, what: str, measuring: Coroutine[Any, Any, Result]) -> Result:
    """Run one measurement, saying on stderr how long it took (the module has a time budget)."""
    started = time.monotonic()
    result = asyncio.run(measuring)
    print(f"  {layer} run {run + 1}, {what}: {time.monotonic() - started:.1f} s", file=sys.stderr)
    return result


def measure_layer(layer: str, workdir: Path, plan: Plan, runs: int) -> list[report.Figure]:
    """Every figure of one channel layer: runs x (floor, each client count, the flood)."""
    latency: dict[int, list[Result]] = {n: [] for n in plan.clients}
    floors: list[tuple[float, float]] = []
    floods: list[Result] = []
    with site(layer, workdir) as the_site:
        floor = ChannelFloor(the_site)  # starts while the logins warm the servers up
        try:
            cookies = {s.url: session_cookie(s.url) for s in the_site.servers}
            # Unmeasured: the first renders, templates and connections of fresh servers.
            warm_up = dataclasses.replace(plan, events=10)
            progress(layer, -1, "warm-up", measure(the_site, cookies, 2, warm_up, flood=False))
            for run in range(runs):
                floors.append(floor.measure())
                for clients in plan.clients:
                    latency[clients].append(
                        progress(layer, run, f"{clients} clients", measure(
                            the_site, cookies, clients, plan, flood=False))
                    )  # fmt: skip
                floods.append(
                    progress(layer, run, "saturated", measure(
                        the_site, cookies, plan.flood_clients, plan, flood=True))
                )  # fmt: skip
        finally:
            floor.close()
    figures = []
    for clients, results in latency.items():
        for q, name, index in ((0.5, "p50", 0), (0.99, "p99", 1)):
            figures.append(
                report.Figure(
                    key=f"live.{layer}.{name}.{clients}c",
                    group=GROUP,
                    label=f"live update {name}, {LAYERS[layer]}, {clients} clients",
                    unit="ms",
                    samples=[pct(r.latencies_ms, q) for r in results],
                    floor_label=f"bare group_send round trip {name}, same layer",
                    floor_samples=[f[index] for f in floors],
                    aim=AIM_P99 if name == "p99" and clients == 200 else None,
                    note=latency_note(results, plan),
                )
            )
            above_aim = AIM_ABOVE_P50 if name == "p50" else AIM_ABOVE_P99
            figures.append(
                report.Figure(
                    key=f"live.{layer}.{name}_above_post.{clients}c",
                    group=GROUP,
                    label=f"live update {name} above the POST, {LAYERS[layer]}, {clients} clients",
                    unit="ms",
                    samples=[pct(r.above_post_ms, q) for r in results],
                    floor_label=f"bare group_send round trip {name}, same layer",
                    floor_samples=[f[index] for f in floors],
                    aim=above_aim if clients == 50 else None,
                    note="from the POST's answer (the event committed) to the client",
                )
            )
    figures.append(
        report.Figure(
            key=f"live.{layer}.delivery.saturated",
            group=GROUP,
            label=f"delivery while ingestion is saturated, {LAYERS[layer]}, "
            f"{plan.flood_clients} clients",
            unit="ratio",
            samples=[r.delivery for r in floods],
            better="higher",
            aim=AIM_DELIVERY,
            note=flood_note(floods, plan),
        )
    )
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = report.cli((__doc__ or "").splitlines()[0])
    parser.set_defaults(runs=3)  # each run is tens of seconds per layer
    parser.add_argument("--layer", nargs="+", default=list(LAYERS), choices=list(LAYERS))
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"live updates: {args.runs} runs, {os.cpu_count()} CPUs, load average {load} at start")
    figures: list[report.Figure] = []
    with tempfile.TemporaryDirectory() as tmp:
        for layer in args.layer:
            figures += measure_layer(layer, Path(tmp), plan, args.runs)
    report.emit(figures, args.json)
    for f in figures:
        if f.note:
            print(f"  {f.key}: {f.note}")


if __name__ == "__main__":
    main()

"""Live feed latency: ``python -m benchmarks.live_latency [--clients 50 200] [--mode ...]``.

Starts a real sagaboard per mode and measures how long a new saga takes to reach
every browser watching the saga list:

* embedded: a SQLite file, one uvicorn, no Redis (the in-process channel layer);
* production: a fresh PostgreSQL database, ``REDIS_URL`` and two uvicorn processes,
  the websocket clients split evenly across them (one relay holds the Redis lease).
  Redis is ``SAGABOARD_BENCH_REDIS_URL`` (default redis://127.0.0.1:6379), on a
  database index claimed for the run (see ``redis_scratch``).

Clients log in as ``demo`` over HTTP, then open ``/ws/sagas/?list=1`` with the
session cookie. A writer thread posts a saga-created event for a NEW saga at a
steady rate (``POST /api/v1/events``); latency is from just BEFORE the request
starts (an upper bound: it includes the request itself) to when a client receives
a fragment naming that saga. Delivery is received (client, saga) pairs over
expected pairs. All clients share one asyncio process; the client loop's own lag
and CPU are printed, to show it keeps up. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Origin

from benchmarks.live import Server, manage, temp_database
from undo_core import MemoryStore, Saga, SagaChange, define_tool
from undo_core.remote import change_to_event

REDIS_SERVER = os.environ.get("SAGABOARD_BENCH_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")
AIMS_MS = {50: 50.0, 200: 250.0}  # p99 aim per client count
USER = PASSWORD = "demo"
CONNECT_AT_ONCE = 25  # concurrent websocket handshakes while the clients connect
DRAIN_SECONDS = 15.0  # after the last post, how long stragglers may take
TICK = 0.005  # the client loop's lag probe


# -- the site under test ------------------------------------------------------------------

RELAY_KEYS = ("sagaboard:relay:leader", "sagaboard:relay:cursor")
CLAIM = "sagaboard:bench:claim"


@contextmanager
def redis_scratch(server: str = REDIS_SERVER, hold_seconds: int = 600) -> Iterator[str]:
    """A Redis URL on a database index no other run holds, without relay keys left in it.

    Why: the relay lease and cursor keys do not name the database they belong to. A
    cursor left by an earlier run (another, bigger event log) makes a fresh cluster's
    relay skip every event below it, and two clusters on one index share one lease,
    so one of them has no relay at all. Each run claims an index (SET NX, expiring)
    and clears only that index's relay keys. Pub/sub channels are global to the
    Redis server whatever the index, so concurrent runs can still hear each other.
    """
    import redis

    for index in random.sample(range(1, 16), 15):
        url = f"{server}/{index}"
        client = redis.Redis.from_url(url, socket_timeout=5)
        try:
            if client.set(CLAIM, uuid.uuid4().hex, nx=True, ex=hold_seconds):
                client.delete(*RELAY_KEYS)
                try:
                    yield url
                finally:
                    client.delete(*RELAY_KEYS, CLAIM)
                return
        finally:
            client.close()
    raise RuntimeError(f"no free Redis database index on {server} (1-15 all claimed)")


@dataclass
class Site:
    servers: list[Server]
    token: str

    @property
    def api(self) -> str:
        return f"{self.servers[0].url}/api/v1/events"


# The demo project under a pk of our choosing, then the demo sagas and the demo/demo login.
_LOAD_DEMO = (
    "from django.core.management import call_command; from sagaboard.models import Project; "
    "Project.objects.create(pk={pk}, slug='demo', name='Demo shop'); "
    "call_command('sagaboard_demo', '--force')"
)


def load_demo(url: str) -> None:
    """Migrate, then load the demo project (under a random pk), its sagas and demo/demo.

    Why the random pk: channel-layer groups are named after the project's pk
    (``project.1`` in every fresh database) and Redis pub/sub ignores the database
    index, so two clusters on one Redis at once (a test run and a benchmark) would
    otherwise hear each other's events.
    """
    manage(url, "migrate", "--no-input", "-v0")
    manage(url, "shell", "-v", "0", "-c", _LOAD_DEMO.format(pk=random.randrange(10**6, 10**9)))


def setup_database(url: str) -> str:
    """The demo project, sagas and login (``load_demo``); returns an API token for it."""
    load_demo(url)
    return manage(url, "sagaboard_token", "create", "demo", "--label", "bench")


@contextmanager
def site(mode: str, workdir: Path) -> Iterator[Site]:
    """A running cluster for ``mode``; torn down (servers, database) on exit."""
    production = mode == "production"
    with ExitStack() as stack:
        url = stack.enter_context(temp_database("postgres" if production else "sqlite", workdir))
        token = setup_database(url)
        # An empty REDIS_URL keeps the embedded server off Redis even if the shell has one.
        env = {"REDIS_URL": stack.enter_context(redis_scratch()) if production else ""}
        servers = [Server(url, env=env) for _ in range(2 if production else 1)]
        try:
            for server in servers:
                server.start()
            yield Site(servers, token)
        finally:
            for server in servers:
                server.stop()


# -- browsers -----------------------------------------------------------------------------


async def login(base: str) -> str:
    """Log in as a browser does; return the Cookie header (session + csrf)."""
    async with httpx.AsyncClient(base_url=base, timeout=30, trust_env=False) as http:
        (await http.get("/login/")).raise_for_status()
        csrf = http.cookies["csrftoken"]
        form = {"username": USER, "password": PASSWORD, "csrfmiddlewaretoken": csrf}
        answer = await http.post("/login/", data=form, headers={"Referer": f"{base}/login/"})
        if "sessionid" not in http.cookies:
            raise RuntimeError(f"login failed: {answer.status_code} {answer.text[:200]}")
        return f"sessionid={http.cookies['sessionid']}; csrftoken={csrf}"


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


# -- the writer ---------------------------------------------------------------------------


class _Recorder(MemoryStore):
    def __init__(self) -> None:
        super().__init__(keep_events=False)
        self.sent: list[dict[str, Any]] = []

    def apply(self, change: SagaChange) -> None:
        super().apply(change)
        self.sent.append(change_to_event(change))


_TOOL = define_tool("reserve_stock", lambda i: {"ok": True}, lambda o, i: None)


def saga_started(saga_id: str) -> bytes:
    """The SDK's first event for a new saga (kind "saga", from_state null), as a body."""
    recorder = _Recorder()
    Saga("live-latency", store=recorder, saga_id=saga_id).execute(_TOOL, {})
    return json.dumps({"events": recorder.sent[:1]}).encode()


@dataclass
class Writer:
    """Posts one new saga per tick from its own thread, so the clients' loop never waits."""

    api: str
    token: str
    saga_ids: list[str]
    rate: float
    posted: dict[str, float] = field(default_factory=dict)
    request_seconds: list[float] = field(default_factory=list)
    error: BaseException | None = None

    def run(self) -> None:
        bodies = [saga_started(s) for s in self.saga_ids]
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        try:
            with httpx.Client(headers=headers, timeout=10, trust_env=False) as http:
                started = time.perf_counter()
                for n, (saga_id, body) in enumerate(zip(self.saga_ids, bodies, strict=True)):
                    time.sleep(max(0.0, started + n / self.rate - time.perf_counter()))
                    before = time.perf_counter()
                    self.posted[saga_id] = before  # before the request: an upper bound
                    answer = http.post(self.api, content=body)
                    self.request_seconds.append(time.perf_counter() - before)
                    answer.raise_for_status()
                    if answer.json()["results"][0]["status"] != "applied":
                        raise RuntimeError(f"{saga_id}: {answer.text[:200]}")
        except BaseException as err:  # reported by the measuring loop
            self.error = err


# -- one measurement ----------------------------------------------------------------------


@dataclass
class Usage:
    """CPU spent and time spent waiting for a CPU, to tell a slow server from a busy box."""

    server_cpu: float = 0.0
    server_runqueue: float = 0.0
    client_cpu: float = 0.0
    wall: float = 0.0


def _proc_seconds(pid: int) -> tuple[float, float]:
    """(CPU seconds, seconds runnable but not running) of a process, all threads (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        waits = [
            int(p.read_text().split()[1]) for p in Path(f"/proc/{pid}/task").glob("*/schedstat")
        ]
    except (OSError, IndexError, ValueError):
        return float("nan"), float("nan")
    return cpu, sum(waits) / 1e9


def usage_now(servers: list[Server]) -> Usage:
    per = [_proc_seconds(s.proc.pid) for s in servers if s.proc is not None]
    return Usage(
        sum(c for c, _ in per), sum(w for _, w in per), time.process_time(), time.perf_counter()
    )


def usage_since(before: Usage, servers: list[Server]) -> Usage:
    now = usage_now(servers)
    return Usage(
        now.server_cpu - before.server_cpu,
        now.server_runqueue - before.server_runqueue,
        now.client_cpu - before.client_cpu,
        now.wall - before.wall,
    )


@dataclass
class Result:
    mode: str
    clients: int
    events: int
    latencies_ms: list[float]
    expected: int
    duplicates: int
    request_ms: list[float]
    lag_ms: list[float]
    usage: Usage

    @property
    def delivery(self) -> float:
        return 100.0 * len(self.latencies_ms) / self.expected if self.expected else 0.0


async def measure(mode: str, the_site: Site, clients: int, events: int, rate: float) -> Result:
    run = uuid.uuid4().hex[:8]
    pattern = re.compile(rf"lat-{run}-\d+\b")
    cookies = {s.url: await login(s.url) for s in the_site.servers}
    bases = [the_site.servers[n % len(the_site.servers)].url for n in range(clients)]
    tabs = [Client(base, cookies[base], pattern) for base in bases]
    await open_clients(tabs)
    listeners = [asyncio.create_task(t.listen()) for t in tabs]
    lag: list[float] = []
    stop = asyncio.Event()
    prober = asyncio.create_task(loop_lag(lag, stop))
    await asyncio.sleep(0.5)  # let every consumer finish its connect-time catch-up
    ids = [f"lat-{run}-{n}" for n in range(events)]
    writer = Writer(the_site.api, the_site.token, ids, rate)
    try:
        before = usage_now(the_site.servers)
        thread = threading.Thread(target=writer.run, daemon=True)
        thread.start()
        await wait_for_delivery(tabs, writer, thread, events / rate + 30)
        used = usage_since(before, the_site.servers)
    finally:
        stop.set()
        for task in [*listeners, prober]:
            task.cancel()
        await asyncio.gather(*listeners, prober, return_exceptions=True)
        await asyncio.gather(*(t.ws.close() for t in tabs if t.ws), return_exceptions=True)
    if writer.error is not None:
        raise RuntimeError(f"the writer failed: {writer.error!r}") from writer.error
    return Result(
        mode,
        clients,
        len(writer.posted),
        [1e3 * (at - writer.posted[s]) for t in tabs for s, at in t.received.items()],
        clients * len(writer.posted),
        sum(t.duplicates for t in tabs),
        [1e3 * s for s in writer.request_seconds],
        [1e3 * s for s in lag],
        used,
    )


async def wait_for_delivery(
    tabs: list[Client], writer: Writer, thread: threading.Thread, bound: float
) -> None:
    """Until every tab has every posted saga, or the drain time after the writer ends."""
    deadline = time.monotonic() + bound
    drain_until: float | None = None
    while time.monotonic() < deadline:
        if not thread.is_alive():
            if drain_until is None:
                drain_until = time.monotonic() + DRAIN_SECONDS
            wanted = len(writer.posted)
            if all(len(t.received) >= wanted for t in tabs) or time.monotonic() > drain_until:
                return
        await asyncio.sleep(0.05)


# -- report -------------------------------------------------------------------------------


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


HEADER = (
    f"{'mode':<11} {'clients':>7} {'events':>6} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} "
    f"{'max ms':>7} {'deliv.':>7} {'dups':>5} {'p99/aim':>8} {'POST p50/p99':>13} "
    f"{'clientlag p99':>13} {'srv CPU/wait s':>14} {'client CPU s':>12}"
)


def row(r: Result) -> str:
    lat, u = r.latencies_ms, r.usage
    aim = AIMS_MS.get(r.clients)
    ratio = f"{pct(lat, 0.99) / aim:.2f}x" if aim else "-"
    post = f"{pct(r.request_ms, 0.5):.0f}/{pct(r.request_ms, 0.99):.0f}"
    server = f"{u.server_cpu:.1f}/{u.server_runqueue:.1f}"
    return (
        f"{r.mode:<11} {r.clients:>7} {r.events:>6} {pct(lat, 0.5):>7.1f} {pct(lat, 0.95):>7.1f} "
        f"{pct(lat, 0.99):>7.1f} {max(lat, default=float('nan')):>7.1f} {r.delivery:>6.1f}% "
        f"{r.duplicates:>5} {ratio:>8} {post:>13} {pct(r.lag_ms, 0.99):>13.1f} {server:>14} "
        f"{u.client_cpu:>12.1f}"
    )


def verdict(results: list[Result]) -> list[str]:
    lines = []
    for r in results:
        aim = AIMS_MS.get(r.clients)
        ok_lat = aim is None or pct(r.latencies_ms, 0.99) < aim
        ok_del = r.delivery == 100.0 and r.duplicates == 0
        aim_text = f"p99 < {aim:g} ms" if aim else "no latency aim"
        lines.append(
            f"  {r.mode} x {r.clients}: {aim_text}: {'met' if ok_lat else 'MISSED'}; "
            f"100% delivery, no duplicates: {'met' if ok_del else 'MISSED'}"
        )
    return lines


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--events", type=int, default=200, help="new sagas per measurement")
    parser.add_argument("--rate", type=float, default=20.0, help="sagas posted per second")
    parser.add_argument(
        "--mode", nargs="+", default=["embedded", "production"], choices=["embedded", "production"]
    )
    args = parser.parse_args(argv)
    print(
        f"live feed latency: {args.events} new sagas at {args.rate:g}/s per measurement\n"
        "  latency: from just BEFORE each POST starts (an upper bound: the request's own time "
        "is included) to a client receiving a fragment naming that saga\n"
        "  POST: the writer's request time; clientlag: how late the clients' one asyncio loop "
        "woke (its own share); srv CPU/wait: the web processes' CPU seconds and seconds "
        "spent runnable but waiting for a CPU during the measurement\n"
        f"  machine: {os.cpu_count()} CPUs, load average {_load()} at start"
    )
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.mode:
            with site(mode, Path(tmp)) as the_site:
                for clients in args.clients:
                    result = asyncio.run(measure(mode, the_site, clients, args.events, args.rate))
                    results.append(result)
                    if len(results) == 1:
                        print(HEADER)
                    print(row(result), flush=True)
    print(f"load average {_load()} at the end")
    print("aims (p99 < 50 ms at 50 clients, < 250 ms at 200 clients, 100% delivery):")
    print("\n".join(verdict(results)))


if __name__ == "__main__":
    main()

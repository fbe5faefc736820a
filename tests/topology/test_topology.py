"""The production topology under load, as the Procfile runs it: nginx (deploy/nginx.conf) in
front of a gunicorn web server with 2 worker processes (WSGI: pages and the API) and a uvicorn
live process (ASGI: websockets), 2 Celery workers, Redis, one browser tab.

Everything runs on 127.0.0.1 against a throw-away database of the run's kind (a fresh
PostgreSQL database when the suite's ``DATABASE_URL`` is PostgreSQL, else a SQLite
file), set up with the real commands (``migrate``, the demo project and its demo/demo
login, an API token), and a Redis database index claimed for the run:

* web: gunicorn, 2 workers (``WEB_CONCURRENCY``'s default), every HTTP request through nginx;
* live: uvicorn, every websocket through nginx; ``REDIS_URL`` set, so its relay holds the
  lease and is woken through Redis when a web worker commits an event;
* worker A (``celery worker --pool=solo``) and worker B (the same, with ``-B``: the beat
  whose sweep re-queues orphaned work), ``SAGABOARD_WORKER_LEASE_SECONDS=10``;
* a browser tab: logged in as demo through nginx, its websocket on the saga list.

The agent side drives 200 sagas through nginx with the SDK, four at a time:

* 67 run by sagaboard (``SagaboardClient``, the manual flow): two steps whose undos are
  server-side handlers (``topology.return_item`` / ``topology.refund_payment``: the demo's
  ``storebot.*`` handlers, wrapped to log every call: tests/support/topology_compensations.py),
  completed, then a step that fails, then ``rollback``: the workers run the undos;
* 67 mirrored in-process sagas (``SagaboardStore``) that complete, and 66 that roll
  back in the agent (their undos run here, in the test process).

Worker A stops in the middle of its third undo (after the call has started, before it
returns) and is SIGKILLed there, while the sagas are still being driven: its task is
never acknowledged and its saga's lease names a dead pid. Worker B's sweep finds the
saga once its lease lapsed and it was untouched for 30 s, and B runs the interrupted
undo again with the same idempotency key, then the rest of that rollback.

What must hold at the end (every wait bounded in time, every loop in count):

1. Every saga reached its designed end, read back with ``GET /api/v1/sagas/{id}``:
   ROLLED_BACK (steps ROLLED_BACK, ROLLED_BACK, FAILED) or COMPLETED.
2. No event was lost: each saga's engine events (``seq`` not NULL) are exactly
   1..n in log order, with n the saga's own ``seq``; for a mirrored saga n is also the
   local saga's seq. The workers' ``undo.output`` timeline entries (``seq`` NULL) come
   at most once per step.
3. No undo ran twice: per idempotency key at most one *successful* run of the handler
   (an ``exit`` line) and exactly one succeeded attempt on the server; a second
   ``enter`` is allowed only after a call that never returned, in the killed worker.
   The in-process undos of the mirrored sagas ran once each, newest first.
4. Every event committed by a web worker reached the browser on the live process. Each
   event of the log becomes one live fragment carrying its log id (``data-last`` of the live cursor,
   ``saga_list.html#saga-row-live``), so the criterion is the set of log ids: every log id of
   the 200 sagas' events (from the API) is among those the tab received, and no log
   id came twice. A fragment is rendered after its event committed, from the saga's
   state then, so the tab's newest row of each saga must also show its final status.

Redis: the run's own ``SAGABOARD_REDIS_PREFIX`` names the relay's keys and the channel
layer's channels. Celery's queue ignores that prefix (a product bug, see
``test_every_redis_name_carries_the_installation_prefix``), so every process runs
``tests.support.topology_settings``, which only gives the run a queue of its own. The run's
Redis index (``redis_database``) is flushed at the end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

from tests.support.live_server import (
    ROOT,
    Proxy,
    Server,
    Worker,
    load_demo,
    manage,
    redis_database,
    session_cookie,
    temp_database,
)
from undo_core import Saga, SagaRollbackError, define_tool
from undo_core.remote import SagaboardClient, SagaboardStore

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
# A server, or an index to claim (``redis_database``: a flushed index of this run's own).
REDIS_SERVER = os.environ.get("SAGABOARD_TOPOLOGY_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")

SERVER_SAGAS, MIRRORED_COMPLETED, MIRRORED_ROLLED_BACK = 67, 67, 66
DRIVERS = 4  # sagas driven at once (2 CPUs run everything here)
LEASE_SECONDS = 10
HOLD_AT = 3  # worker A is killed inside its third undo
START_SECONDS = 30.0  # a web process or a worker is up
DRIVE_SECONDS = 90.0  # all 200 sagas driven
KILL_SECONDS = 45.0  # worker A reaches its third undo
RECOVERY_SECONDS = 75.0  # after the kill: lease (10 s) + staleness (30 s) + beat (10 s) + slack
ARRIVAL_SECONDS = 10.0  # after the last rollback and 400 reads: the last fragments reach the tab

LOG_ID = re.compile(r'data-last="(\d+)"')
ROW = re.compile(
    r'<tr id="saga-\d+">.*?<code class="muted">([^<]+)</code>.*?title="([A-Z_]+)"', re.S
)


# ---------------------------------------------------------------- processes


# ---------------------------------------------------------------- the browser tab


class Tab(threading.Thread):
    """The saga list's websocket, read all the time on a thread of its own.

    Read continuously so that the server never waits on this client; the messages
    are looked at only once the run is over.
    """

    def __init__(self, base_url: str) -> None:
        super().__init__(name="topology-tab", daemon=True)
        self.ws: ClientConnection = connect(
            base_url.replace("http://", "ws://") + "/ws/sagas/?list=1",
            origin=Origin(base_url),
            additional_headers={"Cookie": session_cookie(base_url)},
            open_timeout=10,
            close_timeout=2,
            proxy=None,
            max_size=None,
        ).__enter__()  # closed by close()
        self.messages: list[str] = []
        self.closed: str | None = None
        self.halt = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                message = self.ws.recv(timeout=0.2)
            except TimeoutError:
                continue
            except ConnectionClosed as err:
                self.closed = repr(err)
                return
            with self.lock:
                self.messages.append(str(message))

    def log_ids(self) -> list[int]:
        with self.lock:
            return [int(n) for m in self.messages for n in LOG_ID.findall(m)]

    def wait_for(self, wanted: set[int], seconds: float) -> None:
        """Until every wanted log id arrived (bounded), then a little longer for repeats."""
        deadline = time.monotonic() + seconds
        while not wanted <= set(self.log_ids()) and time.monotonic() < deadline:
            if self.closed:
                break
            time.sleep(0.1)
        time.sleep(0.5)

    def newest_rows(self) -> dict[str, tuple[int, str]]:
        """Per saga id: the newest fragment's log id and the status its row shows."""
        newest: dict[str, tuple[int, str]] = {}
        with self.lock:
            messages = list(self.messages)
        for message in messages:
            ids, rows = LOG_ID.findall(message), ROW.findall(message)
            if len(ids) != 1 or len(rows) != 1:
                continue
            log_id, (saga_id, status) = int(ids[0]), rows[0]
            if log_id > newest.get(saga_id, (0, ""))[0]:
                newest[saga_id] = (log_id, status)
        return newest

    def close(self) -> None:
        self.halt.set()
        self.join(timeout=5)
        with contextlib.suppress(Exception):
            self.ws.close()


# ---------------------------------------------------------------- the agent side


@dataclass
class Plan:
    saga_id: str
    kind: str  # "server" | "completed" | "rolled_back"

    @property
    def final(self) -> str:
        return "COMPLETED" if self.kind == "completed" else "ROLLED_BACK"

    @property
    def steps(self) -> list[tuple[str, str]]:
        if self.kind == "completed":
            return [("return_item", "COMPLETED"), ("refund_payment", "COMPLETED"),
                    ("generate_label", "COMPLETED")]  # fmt: skip
        return [("return_item", "ROLLED_BACK"), ("refund_payment", "ROLLED_BACK"),
                ("generate_label", "FAILED")]  # fmt: skip


def plans(run: str) -> list[Plan]:
    """200 sagas, the three kinds interleaved so that rollbacks go on all along."""
    counts = {"server": SERVER_SAGAS, "completed": MIRRORED_COMPLETED,
              "rolled_back": MIRRORED_ROLLED_BACK}  # fmt: skip
    out: list[Plan] = []
    for n in range(max(counts.values())):
        for kind, count in counts.items():
            if n < count:
                out.append(Plan(f"topo-{run}-{kind[0]}{n:03d}", kind))
    return out


@dataclass
class Agent:
    url: str
    token: str
    store: SagaboardStore
    local_seq: dict[str, int] = field(default_factory=dict)
    undone: list[tuple[str, str]] = field(default_factory=list)
    driven: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    clients: list[SagaboardClient] = field(default_factory=list)
    _local: threading.local = field(default_factory=threading.local)

    def client(self) -> SagaboardClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = SagaboardClient(
                self.url, self.token, timeout=30, retries=6
            )
            with self.lock:
                self.clients.append(client)
        return client

    def drive(self, plan: Plan) -> None:
        if plan.kind == "server":
            self._server(plan.saga_id)
        else:
            self._mirrored(plan.saga_id, rolls_back=plan.kind == "rolled_back")
        with self.lock:
            self.driven += 1

    def _server(self, sid: str) -> None:
        """The manual flow: sagaboard records the steps; its workers will run the undos."""
        client = self.client()
        client.begin("topology-server", saga_id=sid)
        for tool, handler, given, output in (
            ("return_item", "topology.return_item", {"itemId": sid}, {"rma": f"rma-{sid}"}),
            ("refund_payment", "topology.refund_payment", {"chargeId": sid}, {"id": f"re-{sid}"}),
        ):
            undo = {"kind": "handler", "handler": handler, "args": {}}
            step = client.add_step(sid, tool, given, undo=undo)
            client.complete_step(sid, step["id"], output)
        label = client.add_step(sid, "generate_label", {"orderId": sid})
        client.fail_step(sid, label["id"], "carrier API returned 500")
        saga = client.rollback(sid, reason="shipping failed")
        # The answer is read after the commit that queued the undos: a quick worker may
        # already have run them.
        assert saga["status"] in ("COMPENSATING", "ROLLED_BACK"), saga

    def _mirrored(self, sid: str, *, rolls_back: bool) -> None:
        """A saga run in this process, every transition mirrored to sagaboard."""

        def undo(out: Any, given: Any) -> None:
            with self.lock:
                self.undone.append((out["saga"], out["tool"]))

        def tool(name: str, fails: bool = False) -> Any:
            def run(given: Any) -> Any:
                if fails:
                    raise ConnectionError("carrier API returned 500")
                return {"saga": sid, "tool": name}

            return define_tool(name, run, undo)

        saga = Saga("topology-mirrored", store=self.store, saga_id=sid)
        saga.execute(tool("return_item"), {"itemId": sid})
        saga.execute(tool("refund_payment"), {"chargeId": sid})
        if rolls_back:
            with pytest.raises(SagaRollbackError):
                saga.execute(tool("generate_label", fails=True), {"orderId": sid})
        else:
            saga.execute(tool("generate_label"), {"orderId": sid})
            saga.complete()
        with self.lock:
            self.local_seq[sid] = saga.snapshot().record.seq

    def close(self) -> None:
        for client in self.clients:
            client.close()


# ---------------------------------------------------------------- the run


def _calls(directory: Path) -> list[dict[str, Any]]:
    path = directory / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _until(
    condition: Callable[[], Any], what: str, seconds: float, alive: list[Worker], poll: float
) -> Any:
    """Poll until ``condition()`` is true; fail at the deadline or when a worker died."""
    deadline = time.monotonic() + seconds
    for _ in range(int(seconds / poll) + 2):
        value = condition()
        if value:
            return value
        dead = [w.name for w in alive if not w.alive()]
        if dead or time.monotonic() > deadline:
            logs = "\n".join(f"--- worker {w.name}\n{w.tail()}" for w in alive)
            why = f"worker {dead[0]} exited" if dead else f"timed out after {seconds:g} s"
            raise AssertionError(f"{why} waiting for {what}\n{logs}")
        time.sleep(poll)
    raise AssertionError(f"gave up waiting for {what}")


class EventsNeverShown(AssertionError):
    """Events in the log that never reached a browser (the relay's known PostgreSQL gap)."""


def test_two_web_processes_two_workers_200_sagas_a_worker_killed_mid_undo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="httpx")  # a line per request otherwise
    began = time.monotonic()
    phases: dict[str, float] = {}
    run = uuid.uuid4().hex[:8]
    names = f"sagaboard-topology-{run}"  # the Redis prefix, and in the queue's name
    calls_dir = tmp_path / "calls"
    calls_dir.mkdir()
    monkeypatch.delenv("REDIS_URL", raising=False)  # manage() below: no broker of ours
    monkeypatch.setenv("SAGABOARD_TASKS_EAGER", "0")

    with ExitStack() as stack:
        url = stack.enter_context(temp_database("postgres" if PG else "sqlite", tmp_path))
        load_demo(url)  # the demo project (random pk), its sagas, the demo/demo login
        token = manage(url, "sagaboard_token", "create", "demo", "--label", "topology")
        redis_url = stack.enter_context(redis_database(REDIS_SERVER))
        phases["setup"] = time.monotonic() - began

        env = {
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "tests.support.topology_settings",
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
            "REDIS_URL": redis_url,
            "SAGABOARD_REDIS_PREFIX": names,
            "SAGABOARD_TEST_QUEUE": f"{names}-tasks",
            "SAGABOARD_COMPENSATION_MODULES": "tests.support.topology_compensations",
            "SAGABOARD_TOPOLOGY_DIR": str(calls_dir),
            "SAGABOARD_WORKER_LEASE_SECONDS": str(LEASE_SECONDS),
            "SAGABOARD_TASKS_EAGER": "0",
            "SAGABOARD_DEBUG": "0",
            "SAGABOARD_LOG_LEVEL": "WARNING",
            "SAGABOARD_SECRET_KEY": f"topology-test-only-{uuid.uuid4().hex}",
        }
        worker_env = {**os.environ, **env, "SAGABOARD_LOG_LEVEL": "INFO"}
        a = Worker("a", {**worker_env, "SAGABOARD_TOPOLOGY_HOLD_AT": str(HOLD_AT)}, tmp_path,
                   beat=False)  # fmt: skip
        stack.callback(a.stop)
        b = Worker("b", worker_env, tmp_path, beat=True)
        stack.callback(b.stop)
        web = Server(url, settings="tests.support.topology_settings", env=env,
                     server="gunicorn", workers=2)  # fmt: skip
        live = Server(url, settings="tests.support.topology_settings", env=env)
        proxy = Proxy(tmp_path, web=[web], live=[live])
        for part in (web, live, proxy):
            stack.callback(part.stop)
        web.start(timeout=START_SECONDS)
        live.start(timeout=START_SECONDS)
        proxy.start()
        for w in (a, b):
            w.wait_ready(START_SECONDS)
        tab = Tab(proxy.url)
        stack.callback(tab.close)
        tab.start()
        phases["started"] = time.monotonic() - began

        # ------------------------------------------------ drive 200 sagas through nginx
        store = SagaboardStore(proxy.url, token, flush_interval=0.02, timeout=30)
        stack.callback(store.close, timeout=10)
        agent = Agent(proxy.url, token, store)
        stack.callback(agent.close)
        todo = plans(run)
        assert len(todo) == 200
        pool = ThreadPoolExecutor(DRIVERS, thread_name_prefix="topology-agent")
        stack.callback(pool.shutdown, wait=False, cancel_futures=True)
        futures = [pool.submit(agent.drive, plan) for plan in todo]

        # ------------------------------------------------ worker A dies inside an undo
        held_file = calls_dir / "held.json"
        _until(held_file.exists, "worker A to reach its third undo", KILL_SECONDS, [a, b], 0.02)
        held = json.loads(held_file.read_text())
        assert held["pid"] == a.pid
        a.crash()
        killed_at = time.monotonic()
        driven_at_kill = agent.driven
        phases["kill"] = killed_at - began

        done, pending = wait(futures, timeout=DRIVE_SECONDS, return_when=FIRST_EXCEPTION)
        for future in done:
            future.result()  # an agent's error, as it was raised
        assert not pending, f"{len(pending)} sagas not driven within {DRIVE_SECONDS:g} s"
        assert store.flush(timeout=60), "the mirrored sagas' events were not all taken"
        phases["driven"] = time.monotonic() - began

        # ------------------------------------------------ worker B finishes every rollback
        reader = SagaboardClient(proxy.url, token, timeout=30, retries=6)
        stack.callback(reader.close)
        waiting = {p.saga_id for p in todo if p.kind == "server"}

        def rolled_back() -> bool:
            for sid in sorted(waiting):
                if reader.get_saga(sid)["status"] != "COMPENSATING":
                    waiting.discard(sid)
            return not waiting

        left = RECOVERY_SECONDS - (time.monotonic() - killed_at)
        _until(rolled_back, "every server-side rollback to end", max(left, 5.0), [b], 0.5)
        phases["rolled back"] = time.monotonic() - began

        # ------------------------------------------------ read everything back
        sagas = {p.saga_id: reader.get_saga(p.saga_id) for p in todo}
        logs = {p.saga_id: list(reader.list_events(p.saga_id, limit=1000)) for p in todo}
        wanted = {e["log_id"] for log in logs.values() for e in log}
        tab.wait_for(wanted, ARRIVAL_SECONDS)
        phases["delivered"] = time.monotonic() - began
        calls = _calls(calls_dir)
        # 0. every saga (the demo's, the mirrored and the server-run ones, a worker killed
        # mid-undo) replays from its event log to exactly its stored record
        verified = subprocess.run(
            [sys.executable, "manage.py", "sagaboard_verify"], cwd=ROOT, capture_output=True,
            text=True, timeout=300, env={**os.environ, "DATABASE_URL": url},
        )  # fmt: skip
        assert verified.returncode == 0, verified.stdout[-4000:] + verified.stderr[-4000:]
        phases["verified"] = time.monotonic() - began

    phases["stopped"] = time.monotonic() - began
    print(
        f"\ntopology ({'PostgreSQL' if PG else 'SQLite'}): "
        + ", ".join(f"{k} {v:.1f}s" for k, v in phases.items())
        + f"; killed after {driven_at_kill}/200 sagas driven; {len(wanted)} events; "
        f"{len(calls)} handler calls; tab got {len(tab.log_ids())} fragments"
    )

    # 1. every saga reached its designed end
    wrong = {
        p.saga_id: (sagas[p.saga_id]["status"],
                    [(s["tool_name"], s["state"]) for s in sagas[p.saga_id]["steps"]])
        for p in todo
        if (sagas[p.saga_id]["status"],
            [(s["tool_name"], s["state"]) for s in sagas[p.saga_id]["steps"]])
        != (p.final, p.steps)
    }  # fmt: skip
    assert not wrong, f"{len(wrong)} sagas did not end as designed: {dict(list(wrong.items())[:5])}"
    assert 0 < driven_at_kill < len(todo), "worker A was not killed mid-run"

    # 2. no event lost: contiguous engine seqs, the count the saga (and the agent) has
    for p in todo:
        log, saga = logs[p.saga_id], sagas[p.saga_id]
        assert [e["log_id"] for e in log] == sorted(e["log_id"] for e in log)
        seqs = [e["seq"] for e in log if e["seq"] is not None]
        assert seqs == list(range(1, saga["seq"] + 1)), (p.saga_id, seqs, saga["seq"])
        if p.kind != "server":
            assert saga["seq"] == agent.local_seq[p.saga_id], p.saga_id
        outputs = Counter(e["step_id"] for e in log if e["kind"] == "undo.output")
        assert all(n == 1 for n in outputs.values()), (p.saga_id, outputs)
        if p.kind == "server" and p.saga_id != held["saga"]:
            assert set(outputs) == {"step-1", "step-2"}, (p.saga_id, outputs)

    # 3. no undo ran twice
    server_plans = [p for p in todo if p.kind == "server"]
    keys = {
        s["idempotency_key"]: (p.saga_id, s["id"])
        for p in server_plans
        for s in sagas[p.saga_id]["steps"]
        if s["tool_name"] != "generate_label"
    }
    assert len(keys) == 2 * len(server_plans)
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for call in calls:
        by_key[call["key"]].append(call)
    assert set(by_key) == set(keys), set(by_key) ^ set(keys)
    for key, seen in by_key.items():
        exits = [c for c in seen if c["event"] == "exit"]
        enters = [c for c in seen if c["event"] == "enter"]
        assert len(exits) == 1, (keys[key], seen)  # at most one success, and it succeeded
        assert (seen[0]["saga"], seen[0]["step"]) == keys[key]
        # A second start only after a call that never came back, in the killed worker.
        unfinished = [c for c in enters if c["pid"] == a.pid and exits[0]["pid"] != a.pid]
        assert len(enters) == 1 + len(unfinished), (keys[key], seen)
        assert all(c["key"] == key for c in seen)
    rerun = by_key[held["key"]]
    assert [(c["event"], c["pid"]) for c in rerun] == [
        ("enter", a.pid), ("enter", b.pid), ("exit", b.pid),
    ], rerun  # fmt: skip
    for p in server_plans:
        for s in sagas[p.saga_id]["steps"]:
            outcomes = [t["outcome"] for t in s.get("attempts") or []]
            if s["tool_name"] != "generate_label":
                assert outcomes.count("succeeded") == 1, (p.saga_id, s["id"], outcomes)
        order = [c["step"] for c in calls if c["saga"] == p.saga_id and c["event"] == "exit"]
        assert order == ["step-2", "step-1"], (p.saga_id, order)  # newest first
    undone = Counter(agent.undone)
    assert all(n == 1 for n in undone.values()), undone.most_common(3)
    for p in todo:
        mine = [tool for sid, tool in agent.undone if sid == p.saga_id]
        expected = ["refund_payment", "return_item"] if p.kind == "rolled_back" else []
        assert mine == expected, (p.saga_id, mine)

    # 4. every event reached the tab on the live process, once; its newest row: the final status
    received = tab.log_ids()
    repeated = {n: c for n, c in Counter(received).items() if c > 1}
    assert not repeated, f"events sent to the tab more than once: {repeated}"
    missing = sorted(wanted - set(received))
    if missing:
        lost_by = defaultdict(list)
        for sid, log in logs.items():
            for e in log:
                if e["log_id"] in missing:
                    lost_by[sid].append((e["log_id"], e["seq"], e["kind"], e["to_state"]))
        overtaken = sum(1 for m in missing if max(received, default=0) > m)
        raise EventsNeverShown(
            f"{len(missing)} of {len(wanted)} events never reached the tab (live process; tab "
            f"closed: {tab.closed}); {overtaken} of them are below a log id it did get; "
            f"first: {dict(list(lost_by.items())[:4])}"
        )
    rows = tab.newest_rows()
    shown = {p.saga_id: rows.get(p.saga_id, (0, "never shown"))[1] for p in todo}
    wrong_rows = {sid: s for sid, s in shown.items() if s != sagas[sid]["status"]}
    assert not wrong_rows, f"the tab's newest row shows another status: {wrong_rows}"


# ---------------------------------------------------------------- what the run exposed

# Run by manage.py shell: a writer (an operator's timeline event, through audit_log) whose
# transaction takes its event id and then stays open until the test says ``go``, as a big
# ingest batch or a slow request does. Prints the event's log id once committed.
SLOW_WRITER = """
import json, os, time
from pathlib import Path
from django.db import transaction
from sagaboard.audit.services import audit
from sagaboard.models import Event, Saga
marks = Path(os.environ["SAGABOARD_TOPOLOGY_MARKS"])
saga = Saga.objects.filter(project__slug="demo").order_by("pk").first()
with transaction.atomic():
    audit.record(user=None, actor="topology-test", action="test.slow_writer", saga=saga,
                     to_state=saga.status)
    log_id = Event.objects.filter(saga=saga).order_by("-pk").values_list("pk", flat=True)[0]
    (marks / "written").write_text(str(log_id))
    deadline = time.monotonic() + 60
    while not (marks / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
print(json.dumps({"log_id": log_id}))
"""


@pytest.mark.skipif(not PG, reason="SQLite serialises writers: ids always commit in order")
def test_an_event_committed_late_still_reaches_the_browser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An event whose transaction commits after a later-numbered event was relayed.

    PostgreSQL hands out ids when rows are inserted, not when they commit: writer 1
    takes id n and is still working when writer 2 takes n+1 and commits. The relay
    reads ``id > cursor``, sees n+1, relays it and moves its cursor past n; when
    writer 1 commits, n is never read again, and a consumer's gap check (``prev``)
    cannot see it either, as n was never relayed. The browser keeps the stale row
    until the page is reloaded. One web process without Redis is enough: the relay
    is the same.
    """
    caplog.set_level(logging.WARNING, logger="httpx")
    monkeypatch.delenv("REDIS_URL", raising=False)
    marks = tmp_path / "marks"
    marks.mkdir()
    with ExitStack() as stack:
        url = stack.enter_context(temp_database("postgres", tmp_path))
        load_demo(url)
        token = manage(url, "sagaboard_token", "create", "demo", "--label", "topology")
        secret = f"topology-test-only-{uuid.uuid4().hex}"
        web = Server(url, env={"REDIS_URL": "", "SAGABOARD_SECRET_KEY": secret,
                               "SAGABOARD_LOG_LEVEL": "WARNING"})  # fmt: skip
        stack.callback(web.stop)
        web.start(timeout=START_SECONDS)
        tab = Tab(web.url)
        stack.callback(tab.close)
        tab.start()

        env = {**os.environ, "DATABASE_URL": url,
               "DJANGO_SETTINGS_MODULE": "sagaboard.config.settings",
               "SAGABOARD_SECRET_KEY": secret, "SAGABOARD_TOPOLOGY_MARKS": str(marks)}  # fmt: skip
        writer = subprocess.Popen(
            [sys.executable, "manage.py", "shell", "-v", "0", "-c", SLOW_WRITER],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        stack.callback(lambda: writer.poll() is None and writer.kill())
        _until((marks / "written").exists, "the slow writer's insert", START_SECONDS, [], 0.05)
        held = int((marks / "written").read_text())

        # Meanwhile another writer commits: a saga begun over the API (its first event).
        late = f"late-{uuid.uuid4().hex[:8]}"
        with SagaboardClient(web.url, token, timeout=30) as client:
            client.begin("topology-late", saga_id=late)
            later = [e["log_id"] for e in client.list_events(late)]
        assert later and min(later) > held, (held, later)
        tab.wait_for(set(later), ARRIVAL_SECONDS)
        assert set(later) <= set(tab.log_ids()), "the later event did not reach the tab"

        (marks / "go").write_text("")
        out, err = writer.communicate(timeout=60)
        assert writer.returncode == 0, err[-2000:]
        assert json.loads(out.strip().splitlines()[-1])["log_id"] == held
        tab.wait_for({held}, 5.0)  # a relayed event arrives within tens of milliseconds
        if held not in tab.log_ids():
            raise EventsNeverShown(
                f"event {held} (committed after event {min(later)} was relayed) never reached "
                f"the browser; it got {sorted(set(tab.log_ids()))}"
            )


class NotPrefixed(AssertionError):
    """A name in Redis without the installation's prefix."""


def test_every_redis_name_carries_the_installation_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/configuration.md: ``SAGABOARD_REDIS_PREFIX``, "prefix of every name in Redis; one per
    installation sharing a Redis". The relay's keys and the channel layer's channels have
    it; Celery's queue does not: with REDIS_URL as the broker, every installation sends
    its tasks to ``celery`` (and ``_kombu.binding.celery``) on the broker's database, so
    two installations on one Redis database take each other's tasks (a worker runs
    ``rollback_continue(pk)`` of another installation against its own database).
    """
    prefix = f"sagaboard-prefix-{uuid.uuid4().hex[:8]}"
    with redis_database(REDIS_SERVER) as redis_url:
        import redis

        client = redis.Redis.from_url(redis_url, socket_timeout=5)
        stack = ExitStack()
        stack.callback(client.close)
        with stack:
            before = set(client.scan_iter(count=1000))
            monkeypatch.setenv("REDIS_URL", redis_url)
            monkeypatch.setenv("SAGABOARD_REDIS_PREFIX", prefix)
            monkeypatch.setenv("SAGABOARD_TASKS_EAGER", "0")
            monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
            code = "from sagaboard.worker import tasks; tasks.sweep.delay()"  # any enqueue
            manage(f"sqlite:///{tmp_path / 'unused.sqlite3'}", "shell", "-v", "0", "-c", code)
            made = set(client.scan_iter(count=1000)) - before
            stack.callback(lambda: made and client.delete(*made))  # this claimed index only
            assert made, "the task was not sent to this Redis database"
            outside = sorted(k.decode() for k in made if not k.decode().startswith(prefix))
            if outside:
                raise NotPrefixed(f"names in Redis without the prefix {prefix!r}: {outside}")

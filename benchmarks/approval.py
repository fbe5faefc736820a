"""Approval round trip: ``python -m benchmarks.approval [--mode embedded|production]``.

From an approver's click on "Approve undo" in the approval queue to the approved
undo starting in a Celery worker, p50 and p99, on a real sagaboard: uvicorn, a
real ``celery worker --pool=solo`` and a throw-away database, in both set-ups:

* embedded: a SQLite file, Celery's filesystem broker (the default without Redis);
* production: a fresh PostgreSQL database, Redis as broker and channel layer.

Each saga is run by sagaboard: one ``refund_payment`` step whose undo is a
registered handler, an approval policy on ``refund_*``, and a rollback request.
The worker runs the rollback up to the gate and leaves the approval PENDING. Then,
one approval at a time, with the worker idle:

* browser (the headline): headless Chromium, logged in as an approver, clicks
  "Approve undo" on ``/approvals/``; the page stamps the click event
  (``performance.timeOrigin + performance.now()``, a capturing listener);
* POST: the same htmx POST (session cookie, CSRF header, ``HX-Request``) from
  Python, stamped just before it is sent.

The undo's handler (``benchmarks.approval_probes``) stamps its first line with the
wall clock of the same machine. What lies between: the request, the decision's
transaction, ``rollback_continue.delay`` on commit, the broker, the worker
restoring the saga under its lease and asking the gate again.

Floor: Celery's own dispatch on the same broker and the same worker, in the same
run: ``apply_async`` of a no-op task (from this process, with sagaboard's Celery
app) to that task's first line. No approval path can start an undo sooner than
its broker delivers a task, so the ratio is what sagaboard adds on top of it.
On the filesystem broker the floor is set by the transport's polling interval
(kombu sleeps that long whenever every queue was empty).

Each mode runs in a process of its own (Django is set up once, for its database).
Every wait is bounded (``WAIT_S``), every loop counted (``--approvals`` a run) and timed
(``--budget`` a mode).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks import report
from benchmarks.subrun import figures_of
from tests.support.live_server import (
    Server,
    Worker,
    manage,
    redis_scratch,
    session_cookie,
    temp_database,
)

MODES = ("embedded", "production")
WAIT_S = 20.0  # one undo reaching the worker; seconds even on the slowest broker
SETUP_S = 30.0  # the worker taking every new saga to its approval gate
MIN_APPROVALS = 5  # per run, whatever the time budget says
PASSWORD = "bench-approver-pw-2718"
AIM = report.Aim("click to undo start p99 < 100 ms", "value", "<=", 100.0)
PATHS = {
    "browser": "click in Chromium",
    "post": "htmx POST from Python",
}


# ---------------------------------------------------------------- the worker's probes


class Probes:
    """The probe lines the worker appended (``benchmarks.approval_probes``), read as they come."""

    def __init__(self, path: Path, worker: Worker) -> None:
        self.path, self.worker = path, worker
        self.lines: list[dict[str, Any]] = []
        self._offset = 0

    def _read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        done = chunk.rfind(b"\n") + 1  # whole lines only
        self._offset += done
        self.lines += [json.loads(line) for line in chunk[:done].splitlines()]

    def wait(self, match: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """The first line ``match`` accepts, at most ``WAIT_S`` from now."""
        deadline = time.monotonic() + WAIT_S
        seen = 0
        while True:
            self._read()
            for line in self.lines[seen:]:
                if match(line):
                    return line
            seen = len(self.lines)
            self.worker.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} within {WAIT_S:g} s\n{self.worker.tail()}")
            time.sleep(0.002)

    def idle(self) -> None:
        """Until every task the worker started has ended (bounded)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            self._read()
            events = [line["e"] for line in self.lines]
            if events.count("prerun") == events.count("postrun"):
                return
            self.worker.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the worker stayed busy\n{self.worker.tail()}")
            time.sleep(0.005)

    def task_start(self, saga_pk: int, after: float) -> float:
        """When the rollback task for ``saga_pk`` that came after ``after`` started."""
        for line in self.lines:
            if (
                line["e"] == "prerun"
                and line["task"] == "sagaboard.tasks.rollback_continue"
                and line["args"][:1] == [saga_pk]
                and line["t"] >= after
            ):
                return float(line["t"])
        raise LookupError(f"no rollback task started for saga {saga_pk}")


# ---------------------------------------------------------------- the site


@dataclass
class Site:
    mode: str
    server: Server
    worker: Worker
    probes: Probes
    project: Any
    made: int = 0
    breakdown: dict[str, list[float]] = field(default_factory=dict)

    def gated_sagas(self, count: int) -> list[tuple[int, str, int]]:
        """``count`` new sagas, each waiting in the queue: (approval pk, saga id, saga pk)."""
        from sagaboard.models import Approval
        from sagaboard.record.services import manual_flow

        ids = []
        for _ in range(count):
            self.made += 1
            sid = f"bench-{self.made:04d}"
            ids.append(sid)
            ev = {"project": self.project, "saga_id": sid}
            manual_flow.saga_begin(**ev, event_id=uuid.uuid4().hex, name="bench-refund")
            step = manual_flow.step_add(
                **ev, event_id=uuid.uuid4().hex, tool_name="refund_payment",
                input={"amount": 120, "currency": "EUR"},
                undo={"kind": "handler", "handler": "bench.approved_undo"},
            )  # fmt: skip
            manual_flow.step_complete(**ev, event_id=uuid.uuid4().hex, step_id=step,
                                output={"refund": f"re_{sid}"})  # fmt: skip
            # Commits, then enqueues the worker's rollback_continue (transaction.on_commit).
            manual_flow.saga_rollback_request(**ev, event_id=uuid.uuid4().hex, reason="bench",
                                        actor=None)  # fmt: skip
        pending = Approval.objects.filter(
            saga__saga_id__in=ids, status=Approval.Status.PENDING
        ).values_list("pk", "saga__saga_id", "saga_id")
        deadline = time.monotonic() + SETUP_S
        while len(found := list(pending.all())) < count:  # .all(): a fresh query each time
            self.worker.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(found)} of {count} approvals in {SETUP_S:g} s\n{self.worker.tail()}"
                )
            time.sleep(0.05)
        self.probes.idle()
        return sorted(found, key=lambda row: row[1])

    def undo_started(self, saga_id: str, saga_pk: int, path: str, since: float) -> float:
        """The undo's wall-clock start; keeps the part before the task started, for the note."""
        line = self.probes.wait(
            lambda p: p["e"] == "undo" and p["saga"] == saga_id, f"undo of {saga_id}"
        )
        self.probes.idle()
        started = self.probes.task_start(saga_pk, since)
        self.breakdown.setdefault(f"{path}.to_task", []).append((started - since) * 1e3)
        self.breakdown.setdefault(f"{path}.in_task", []).append((line["t"] - started) * 1e3)
        return float(line["t"])


def _environment(
    mode: str, workdir: Path, url: str, stack: ExitStack, fs_polling: float | None
) -> dict[str, str]:
    env = {
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "benchmarks.approval_settings",
        "SAGABOARD_TASKS_EAGER": "0",
        "SAGABOARD_COMPENSATION_MODULES": "benchmarks.approval_probes",
        "SAGABOARD_BENCH_PROBES": str(workdir / "probes.jsonl"),
        "SAGABOARD_SECRET_KEY": os.environ.get(
            "SAGABOARD_SECRET_KEY", "live-test-only-not-secret-0123456789abcdef"
        ),
        "CELERY_BROKER_URL": "",
    }
    if mode == "production":
        prefix = f"sagaboard-bench-approval-{uuid.uuid4().hex[:8]}"
        redis_url = stack.enter_context(redis_scratch())
        stack.callback(_redis_cleanup, redis_url, prefix)
        env |= {"REDIS_URL": redis_url, "SAGABOARD_REDIS_PREFIX": prefix}
    else:
        env |= {"REDIS_URL": "", "SAGABOARD_BENCH_QUEUE_DIR": str(workdir / "queue")}
        if fs_polling:
            env["SAGABOARD_BENCH_FS_POLLING"] = str(fs_polling)
    return env


def _redis_cleanup(url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@contextmanager
def site(mode: str, workdir: Path, fs_polling: float | None = None) -> Iterator[Site]:
    """A running sagaboard for ``mode``, an approver and a policy; torn down on exit."""
    with ExitStack() as stack:
        url = stack.enter_context(
            temp_database("postgres" if mode == "production" else "sqlite", workdir)
        )
        manage(url, "migrate", "--no-input", "-v0")
        env = _environment(mode, workdir, url, stack, fs_polling)
        os.environ.update(env)
        import django

        django.setup()
        project = _people_and_policy()
        worker = Worker("approval", {**os.environ}, workdir, beat=False)
        stack.callback(worker.stop)
        server = Server(url, settings="benchmarks.approval_settings", env=env)
        server.start()
        stack.callback(server.stop)
        worker.wait_ready()
        yield Site(mode, server, worker, Probes(workdir / "probes.jsonl", worker), project)


def _people_and_policy() -> Any:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from sagaboard.models import ApprovalPolicy, Project

    project = Project.objects.create(slug="bench", name="Bench shop")
    ApprovalPolicy.objects.create(project=project, name="refunds need a person",
                                  tool_glob="refund_*", updated_by="bench")  # fmt: skip
    user = get_user_model().objects.create_user("approver", password=PASSWORD)
    user.groups.add(Group.objects.get(name="approver"))
    project.members.add(user)
    return project


# ---------------------------------------------------------------- the three paths


def floor_dispatch(s: Site, tag: str) -> float:
    """ms from ``apply_async`` of a no-op task to its first line in the worker."""
    from benchmarks.approval_probes import noop

    sent = time.time()
    noop.apply_async((tag,))
    line = s.probes.wait(lambda p: p["e"] == "noop" and p["tag"] == tag, f"no-op {tag}")
    s.probes.idle()
    return (line["t"] - sent) * 1e3


class PostClient:
    """The approver's htmx POST, as the page sends it, from Python."""

    def __init__(self, base: str) -> None:
        cookie = session_cookie(base, "approver", PASSWORD)
        csrf = cookie.split("csrftoken=")[1]
        headers = {"Cookie": cookie, "X-CSRFToken": csrf, "HX-Request": "true",
                   "Referer": f"{base}/approvals/"}  # fmt: skip
        self.http = httpx.Client(base_url=base, headers=headers, timeout=WAIT_S, trust_env=False)

    def approve(self, s: Site, approval: int, saga_id: str, saga_pk: int) -> float:
        sent = time.time()
        answer = self.http.post(f"/approvals/{approval}/decide/",
                                data={"decision": "approve", "reason": "bench"})  # fmt: skip
        started = s.undo_started(saga_id, saga_pk, "post", sent)
        if answer.status_code != 200 or "approved" not in answer.text:
            raise RuntimeError(f"approval {approval}: {answer.status_code} {answer.text[:300]}")
        return (started - sent) * 1e3

    def close(self) -> None:
        self.http.close()


# A capturing listener sees the click before htmx does (htmx acts on the form's submit).
STAMP_CLICKS = """() => {
  window.__clicks = {};
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button.approve");
    if (button) window.__clicks[button.closest("li").dataset.approval] =
      performance.timeOrigin + performance.now();
  }, true);
}"""


class Approver:
    """Headless Chromium on the approval queue, logged in through the login form."""

    def __init__(self, browser: Any, base: str) -> None:
        self.base = base
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(WAIT_S * 1000)
        self.page.goto(f"{base}/login/")
        self.page.fill("input[name=username]", "approver")
        self.page.fill("input[name=password]", PASSWORD)
        self.page.click("button[type=submit]")
        self.page.wait_for_selector("#saga-rows")

    def open_queue(self) -> None:
        self.page.goto(f"{self.base}/approvals/")
        self.page.evaluate(STAMP_CLICKS)

    def approve(self, s: Site, approval: int, saga_id: str, saga_pk: int) -> float:
        item = self.page.locator(f"#approval-{approval}")
        item.locator("input[name=reason]").fill("bench")
        item.locator("button.approve").click()
        clicked = float(self.page.evaluate(f"window.__clicks['{approval}']")) / 1e3
        started = s.undo_started(saga_id, saga_pk, "browser", clicked)
        item.wait_for(state="detached")  # the live queue dropped it: the page saw it through
        return (started - clicked) * 1e3

    def close(self) -> None:
        self.context.close()


@contextmanager
def chromium() -> Iterator[Any]:
    """tests/support/chromium.py's launcher (Debian's Chromium driven by Playwright)."""
    from tests.support import chromium as module  # needs Playwright: only for this figure

    # Playwright's sync API keeps an event loop in this thread; the ORM calls between
    # clicks (this process only) are not async code.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with module.chromium(int(WAIT_S * 1000)) as browser:
        yield browser


# ---------------------------------------------------------------- a mode


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[98]


def _random_phase(mode: str) -> Callable[[], None]:
    """A pause before each action, so it meets the worker at a random point of its poll.

    The filesystem transport sleeps a whole polling interval once its queues are
    empty: an action sent the moment the worker went idle would always wait the
    longest. A person's click comes at any moment; so does each action here.
    """
    from django.conf import settings

    interval = 0.01  # Redis: the worker blocks on BRPOP, no phase to speak of
    if mode == "embedded":
        interval = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("polling_interval", 1.0)
    rng = random.Random(8)
    return lambda: time.sleep(rng.uniform(0, interval))


def measure_mode(mode: str, args: argparse.Namespace) -> list[report.Figure]:
    paths = ["post"] if args.no_browser else ["browser", "post"]
    samples: dict[str, list[list[float]]] = {p: [] for p in [*paths, "floor"]}
    counts: list[int] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        s = stack.enter_context(site(mode, Path(tmp), args.fs_polling))
        post = PostClient(s.server.url)
        stack.callback(post.close)
        pause = _random_phase(s.mode)
        browser = None
        if "browser" in paths:
            browser = Approver(stack.enter_context(chromium()), s.server.url)
            stack.callback(browser.close)
        began = time.monotonic()
        for run in range(args.runs):
            waiting = s.gated_sagas(args.approvals * len(paths))
            if browser is not None:
                browser.open_queue()
            got: dict[str, list[float]] = {p: [] for p in samples}
            deadline = began + args.budget * (run + 1) / args.runs  # with the sagas' set-up
            for i in range(args.approvals):  # interleaved: load drifts hit all three alike
                if i >= MIN_APPROVALS and time.monotonic() > deadline:
                    break  # a slow machine: fewer approvals, the note says how many
                pause()
                got["floor"].append(floor_dispatch(s, f"{run}-{i}"))
                pause()
                got["post"].append(post.approve(s, *waiting.pop()))
                if browser is not None:
                    pause()
                    got["browser"].append(browser.approve(s, *waiting.pop()))
            for name, values in got.items():
                samples[name].append(values)
            counts.append(len(got["floor"]))
    return _figures(mode, paths, samples, s.breakdown, args, counts)


def _figures(
    mode: str,
    paths: list[str],
    samples: dict[str, list[list[float]]],
    breakdown: dict[str, list[float]],
    args: argparse.Namespace,
    counts: list[int],
) -> list[report.Figure]:
    broker = "Redis, PostgreSQL" if mode == "production" else "filesystem broker, SQLite"
    polling = f"; filesystem polling {args.fs_polling:g} s" if args.fs_polling else ""
    floors = {"p50": [statistics.median(r) for r in samples["floor"]],
              "p99": [p99(r) for r in samples["floor"]]}  # fmt: skip
    figures = []
    for path in paths:
        to_task = statistics.median(breakdown[f"{path}.to_task"])
        in_task = statistics.median(breakdown[f"{path}.in_task"])
        # --quick: p50 only; a p99 of 8 clicks is their maximum, too jumpy for a 2x check.
        stats = [("p50", statistics.median)] + ([] if args.quick else [("p99", p99)])
        for stat, of in stats:
            figures.append(report.Figure(
                key=f"approval.{mode}.{path}.{stat}",
                group="Approval round trip",
                label=f"{mode}: {PATHS[path]} to undo start, {stat}",
                unit="ms",
                samples=[of(r) for r in samples[path]],
                floor_label=f"Celery no-op task dispatch {stat} ({broker})",
                floor_samples=floors[stat],
                aim=AIM if stat == "p99" else None,
                note=f"{broker}{polling}; {min(counts)}-{max(counts)} approvals a run; medians: "
                f"{to_task:.1f} ms to the rollback task's start, {in_task:.1f} ms in the "
                "task before the undo (restore, lease, gate)",
            ))  # fmt: skip
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = report.cli((__doc__ or "").splitlines()[0])
    parser.set_defaults(runs=3)
    parser.add_argument(
        "--mode",
        choices=MODES,
        action="append",
        help="embedded and/or production (default: both; --quick: production)",
    )
    parser.add_argument("--approvals", type=int, help="per path and run (default 30, quick 8)")
    parser.add_argument(
        "--budget", type=float, help="seconds a mode may measure, all runs (default 150, quick 30)"
    )
    parser.add_argument("--no-browser", action="store_true", help="the Python POST path only")
    parser.add_argument(
        "--fs-polling",
        type=float,
        help="the filesystem broker's polling interval (s), instead of the "
        "product's, to measure a change before/after",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)  # fmt: skip
    if args.approvals is None:
        args.approvals = 8 if args.quick else 30
    args.no_browser = args.no_browser or args.quick
    args.budget = args.budget or (30.0 if args.quick else 150.0)
    modes = args.mode or (["production"] if args.quick else list(MODES))
    if args.child:
        figures = measure_mode(modes[0], args)
    else:
        figures = []
        for mode in modes:
            child = ["--child", "--mode", mode, "--runs", str(args.runs),
                     "--approvals", str(args.approvals)]  # fmt: skip
            child += ["--budget", str(args.budget)]
            child += ["--no-browser"] if args.no_browser else []
            child += ["--quick"] if args.quick else []
            child += ["--fs-polling", str(args.fs_polling)] if args.fs_polling else []
            figures += figures_of("benchmarks.approval", child, timeout=400)
    report.emit(figures, args.json)


if __name__ == "__main__":
    main()

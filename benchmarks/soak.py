"""The soak: ``python -m benchmarks.soak [--minutes 30] [--db sqlite|postgres]`` (``make soak``).

Not a benchmark of ``make bench`` and not part of CI: a bounded long run (``--minutes``,
30 by default) of agents and operators at a steady pace against a real sagaboard (the fault
suite's site: one web process, one Celery worker with its beat, a throw-away database, a
scratch Redis database, the demo loaded), which records every minute:

* the resident memory (RSS) of the web process and of the worker with its beat;
* the latency of the pages an operator keeps opening (p50, p99, slowest): the overview, the
  saga list, the approval queue, the attention page;
* what got done: agent sagas stored, approvals decided, approved undos finished.

The load, all of it through the product's own doors:

* an agent mirrors sagas of three steps through the SDK (``SagaboardStore``), one after
  another, as the fault suite's agents do;
* an approval agent runs a saga every ``--approval-every`` seconds whose step needs approval,
  rolls it back and waits through ``SagaboardGate`` for an operator's decision;
* an operator opens those pages every few seconds and approves what waits in the queue
  (the queue's own form, with its CSRF token).

At the end: the agents' events all delivered, ``sagaboard_verify`` (every saga replays to
its stored record) and ``--audit`` (every chain unbroken), and the bounds: memory may grow
by at most ``--max-growth-mib`` per process from the first minute after warm-up to the last,
and the last minute's page p50 may be at most ``--max-p50-ratio`` times the first's (the
median: one slow page on a shared machine moves a minute's p99, a leak moves every page). The
script exits 1 when a bound or a check fails, 0 otherwise; the per-minute table is printed
(and written as JSON with ``--out``) for docs/operations.md.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.support.fault_agents import AgentRun, FaultSite, start_site
from tests.support.live_server import manage, process_tree, redis_scratch, temp_database
from undo_core import Saga, define_tool
from undo_core.remote import SagaboardClient, SagaboardGate, SagaboardStore

PAGES = ["/overview/", "/", "/approvals/", "/attention/"]
WARM_UP_MINUTES = 1  # imports, caches and pools fill during the first minute
DECIDE = re.compile(r'/approvals/(\d+)/decide/"')


@dataclass
class Minute:
    """One sample: what the processes held and how the pages answered in that minute."""

    minute: float
    """Minutes since the load started, at the end of the sample."""
    web_rss_mib: float
    worker_rss_mib: float
    pages: int
    page_p50_ms: float
    page_p99_ms: float
    page_max_ms: float
    agent_sagas: int
    approvals_decided: int
    undos_done: int


def rss_mib(pids: list[int]) -> float:
    """Resident memory of ``pids`` together, in MiB (a process gone meanwhile counts 0)."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += int(re.search(r"^VmRSS:\s+(\d+)", status, re.M)[1])  # type: ignore[index]
    return total / 1024


class Counters:
    """Shared between the load's threads and the sampler; ``take`` empties the latencies."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.decided = 0
        self.undone = 0
        self.errors: list[str] = []

    def page(self, seconds: float) -> None:
        with self.lock:
            self.latencies.append(seconds)

    def take(self) -> list[float]:
        with self.lock:
            taken, self.latencies = self.latencies, []
            return taken


def operator(site: FaultSite, counters: Counters, stop: threading.Event, every: float) -> None:
    """Opens the pages, approves what waits in the queue."""
    while not stop.wait(every):
        for page in PAGES:
            began = time.monotonic()
            answer = site.browser.get(page)
            counters.page(time.monotonic() - began)
            if answer.status_code != 200:
                counters.errors.append(f"GET {page}: {answer.status_code}")
                continue
            if page != "/approvals/":
                continue
            for approval in sorted(set(DECIDE.findall(answer.text))):
                decided = site.decide(approval, "soak: approved")
                if decided.status_code == 302:
                    with counters.lock:
                        counters.decided += 1
                elif decided.status_code != 409:  # decided by someone else: not an error
                    counters.errors.append(f"decide {approval}: {decided.status_code}")


def approval_agent(
    site: FaultSite, counters: Counters, stop: threading.Event, every: float
) -> None:
    """A saga whose step needs approval, rolled back, waiting for the operator each time."""
    refund = define_tool(
        "soak_refund", lambda given: {"refunded": given}, lambda out, given: None,
        requires_approval=True,
    )  # fmt: skip
    client = SagaboardClient(site.web.url, site.token)
    with (
        SagaboardStore(site.web.url, site.token, flush_interval=0.02) as store,
        SagaboardGate(client, store=store, max_wait=120, cancel=stop) as gate,
    ):
        n = 0
        while not stop.wait(every):
            saga = Saga(f"soak-approval-{n}", store=store, gate=gate, saga_id=f"soak-appr-{n}")
            saga.execute(refund, {"n": n})
            report = saga.rollback()
            if str(report.status).endswith("ROLLED_BACK"):
                with counters.lock:
                    counters.undone += 1
            elif not stop.is_set():
                counters.errors.append(f"{saga.id}: {report.status}")
            n += 1
    client.close()


def run(args: argparse.Namespace) -> list[Minute]:
    counters, stop = Counters(), threading.Event()
    samples: list[Minute] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        url = stack.enter_context(temp_database(args.db, tmp))
        redis_url = stack.enter_context(redis_scratch(hold_seconds=int(args.minutes * 60) + 600))
        site = start_site(stack, url, redis_url, tmp)
        agents = AgentRun(site, timeout=30)
        threads = [
            threading.Thread(target=operator, args=(site, counters, stop, args.operator_every)),
            threading.Thread(
                target=approval_agent, args=(site, counters, stop, args.approval_every)
            ),
        ]
        for thread in threads:
            thread.start()
        print(f"soak: {args.minutes:g} min on {args.db}, a sample every {args.sample_seconds:g} s")
        print(" min  web MiB  worker MiB  pages  p50 ms  p99 ms  max ms  sagas  decided  undone")
        began, done_before, decided_before, undone_before = time.monotonic(), 0, 0, 0
        try:
            for n in range(1, int(args.minutes * 60 / args.sample_seconds) + 1):
                time.sleep(max(0.0, began + n * args.sample_seconds - time.monotonic()))
                site.worker.check_alive()
                taken = sorted(counters.take()) or [0.0]
                sample = Minute(
                    minute=round(n * args.sample_seconds / 60, 2),
                    web_rss_mib=round(rss_mib(site.web.pids()), 1),
                    worker_rss_mib=round(rss_mib(process_tree(site.worker.pid)), 1),
                    pages=len(taken),
                    page_p50_ms=round(statistics.median(taken) * 1000, 1),
                    page_p99_ms=round(taken[min(len(taken) - 1, int(len(taken) * 0.99))] * 1000, 1),
                    page_max_ms=round(taken[-1] * 1000, 1),
                    agent_sagas=len(agents.done) - done_before,
                    approvals_decided=counters.decided - decided_before,
                    undos_done=counters.undone - undone_before,
                )
                done_before += sample.agent_sagas
                decided_before += sample.approvals_decided
                undone_before += sample.undos_done
                samples.append(sample)
                print(
                    f"{sample.minute:4.1f} {sample.web_rss_mib:8.1f} {sample.worker_rss_mib:11.1f}"
                    f" {sample.pages:6d} {sample.page_p50_ms:7.1f} {sample.page_p99_ms:7.1f}"
                    f" {sample.page_max_ms:7.1f} {sample.agent_sagas:6d}"
                    f" {sample.approvals_decided:8d} {sample.undos_done:7d}",
                    flush=True,
                )
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=150)
            agents.finish(flush_timeout=60)
        replayed = manage(url, "sagaboard_verify")
        chained = manage(url, "sagaboard_verify", "--audit")
        if " 0 difference(s)" not in replayed:
            counters.errors.append(f"sagaboard_verify: {replayed[-500:]}")
        if not chained.endswith("0 break(s)"):
            counters.errors.append(f"sagaboard_verify --audit: {chained[-500:]}")
        print(f"record: {replayed.splitlines()[-1]}; audit: {chained.splitlines()[-1]}")
    args.errors = counters.errors
    return samples


def verdict(samples: list[Minute], args: argparse.Namespace) -> list[str]:
    """What broke a bound (empty: every bound held)."""
    broken = list(args.errors)
    steady = samples[WARM_UP_MINUTES:] if len(samples) > WARM_UP_MINUTES + 1 else samples
    first, last = steady[0], steady[-1]
    for name in ("web_rss_mib", "worker_rss_mib"):
        growth = getattr(last, name) - getattr(first, name)
        print(f"{name}: {getattr(first, name)} -> {getattr(last, name)} ({growth:+.1f} MiB)")
        if growth > args.max_growth_mib:
            broken.append(f"{name} grew {growth:.1f} MiB (bound {args.max_growth_mib:g})")
    print(f"page p99: {first.page_p99_ms} -> {last.page_p99_ms} ms")
    ratio = last.page_p50_ms / max(first.page_p50_ms, 1.0)
    print(f"page p50: {first.page_p50_ms} -> {last.page_p50_ms} ms ({ratio:.2f}x)")
    if ratio > args.max_p50_ratio:
        broken.append(f"page p50 grew {ratio:.2f}x (bound {args.max_p50_ratio:g}x)")
    if not sum(s.undos_done for s in samples):
        broken.append("no approved undo finished")
    return broken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long (default 30)")
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--sample-seconds", type=float, default=60.0, help="default 60")
    parser.add_argument("--operator-every", type=float, default=3.0, help="seconds (default 3)")
    parser.add_argument("--approval-every", type=float, default=15.0, help="seconds (default 15)")
    parser.add_argument("--max-growth-mib", type=float, default=40.0, help="per process (40)")
    parser.add_argument("--max-p50-ratio", type=float, default=2.0, help="last/first (2)")
    parser.add_argument("--out", type=Path, help="write the samples and verdict as JSON")
    args = parser.parse_args(argv)
    samples = run(args)
    broken = verdict(samples, args)
    if args.out:
        args.out.write_text(json.dumps({
            "minutes": args.minutes, "db": args.db, "samples": [asdict(s) for s in samples],
            "broken": broken,
        }, indent=2))  # fmt: skip
    print("soak: " + ("; ".join(broken) if broken else "every bound held"))
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())

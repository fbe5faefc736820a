"""The fault suite's people and agents: the site under test (a web server, a worker with
beat, an operator's browser session, an agent's API client), an agent mirroring sagas, and
reads of the database the servers use (through ``manage.py shell``, as an operator would)."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.live_server import ROOT, Server, Worker, load_demo, manage, session_cookie
from undo_core import Saga, define_tool
from undo_core.remote import SagaboardStore

__all__ = [
    "ATTEMPTS",
    "PENDING",
    "AgentRun",
    "FaultSite",
    "agent",
    "assert_record_verifies",
    "read",
    "rolled_back",
    "saga_status",
    "start_site",
    "undos_ran_once",
]

TOOLS = [define_tool(f"fault_tool_{n}", lambda i: {"ok": i}, lambda o, i: None) for n in range(3)]


# The demo's approval the demo login may decide: its other pending ones were posted with a
# token demo made (four eyes: not demo's to decide).
PENDING = (
    "import json; from sagaboard.models import Approval; "
    "a = Approval.objects.select_related('saga')"
    ".get(status='PENDING', saga__saga_id='demo-refund-awaiting'); "
    "print(json.dumps({'id': a.pk, 'saga_id': a.saga.saga_id}))"
)
ATTEMPTS = (
    "import json; from sagaboard.models import CompensationAttempt as A; "
    "rows = A.objects.filter(step__saga__saga_id='SAGA', outcome='succeeded'); "
    "print(json.dumps({s: rows.filter(step__step_id=s).count() "
    "for s in rows.values_list('step__step_id', flat=True)}))"
)


def read(url: str, code: str) -> Any:
    return json.loads(manage(url, "shell", "-c", code).splitlines()[-1])


def saga_status(api: httpx.Client, saga_id: str) -> str:
    """A saga's status over the API. A 503 is asked again for up to 10 s (the first
    request after a database restart may meet a stale connection); any other answer
    than 200 fails."""
    for _ in range(20):
        answer = api.get(f"/api/v1/sagas/{saga_id}")
        if answer.status_code != 503:
            assert answer.status_code == 200, (saga_id, answer.status_code, answer.text[:300])
            return str(answer.json()["status"])
        time.sleep(0.5)
    raise AssertionError(f"{saga_id}: still 503 after 10 s")


def rolled_back(api: httpx.Client, saga_id: str, worker: Worker, timeout: float) -> float:
    """Poll the saga over the API until it is ROLLED_BACK, failing if ``worker`` exits or
    ``timeout`` passes (with the worker's log); the seconds it took."""
    began = time.monotonic()
    deadline = began + timeout
    while (status := saga_status(api, saga_id)) != "ROLLED_BACK":
        worker.check_alive()
        assert time.monotonic() < deadline, (status, worker.tail())
        time.sleep(0.5)
    return time.monotonic() - began


def undos_ran_once(url: str, saga_id: str) -> dict[str, int]:
    """Each undo of the saga succeeded exactly once (its attempts); {step_id: 1, ...}."""
    ran: dict[str, int] = read(url, ATTEMPTS.replace("SAGA", saga_id))
    assert ran and all(n == 1 for n in ran.values()), ran
    return ran


def assert_record_verifies(url: str) -> None:
    """``sagaboard_verify`` replays every saga to its stored record, and ``--audit`` finds
    every audit chain unbroken."""
    replayed = manage(url, "sagaboard_verify")
    assert " 0 difference(s)" in replayed, replayed
    chained = manage(url, "sagaboard_verify", "--audit")
    assert chained.endswith("0 break(s)"), chained


def agent(store: SagaboardStore, stop: threading.Event, done: list[str]) -> None:
    """Sagas of three steps, one after another, until told to stop."""
    n = 0
    while not stop.is_set():
        saga = Saga(f"fault-{n}", store=store, saga_id=f"fault-agent-{n}")
        for tool in TOOLS:
            saga.execute(tool, {"n": n})
        saga.complete()
        done.append(saga.id)
        n += 1
        time.sleep(0.05)


@dataclass
class FaultSite:
    """What a fault case works with: ``browser`` is a logged-in operator (session cookie and
    CSRF header), ``api`` an agent's bearer-token client of the demo project."""

    web: Server
    worker: Worker
    token: str
    browser: httpx.Client
    csrf: str
    api: httpx.Client
    worker_env: dict[str, str] = field(default_factory=dict)
    """The worker's environment, for a fault case that starts another one like it."""

    def decide(self, approval: int | str, reason: str, decision: str = "approve") -> httpx.Response:
        """The operator decides ``approval`` through the queue's own form (with its CSRF token)."""
        return self.browser.post(
            f"/approvals/{approval}/decide/",
            data={"decision": decision, "reason": reason, "csrfmiddlewaretoken": self.csrf},
        )


def start_site(
    stack: ExitStack,
    url: str,
    redis_url: str,
    tmp_path: Path,
    *,
    worker_env: dict[str, str] | None = None,
    web_env: dict[str, str] | None = None,
    beat: bool = True,
) -> FaultSite:
    """The demo data in ``url``, one web server and one worker with beat on ``redis_url``,
    all stopped when ``stack`` closes; workers lease undos for 10 s, so a lost one is
    taken again within a fault case's wait.

    ``worker_env`` adds to (or overrides) the worker's environment (a test-only settings
    module, say), ``web_env`` the web server's; ``beat=False`` starts the worker without its
    embedded beat (a case that runs ``celery beat`` on its own, or none)."""
    token = load_demo(url, token=True)
    env = {
        "REDIS_URL": redis_url,
        "SAGABOARD_TASKS_EAGER": "0",
        "SAGABOARD_WORKER_LEASE_SECONDS": "10",
        "SAGABOARD_LOG_LEVEL": "WARNING",
    }
    web = stack.enter_context(Server(url, env={**env, **(web_env or {})}))
    worker_env = {
        **os.environ, **env, "DATABASE_URL": url, "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "sagaboard.config.settings", "SAGABOARD_DEBUG": "0",
        **(worker_env or {}),
    }  # fmt: skip
    worker = Worker("w", worker_env, tmp_path, beat=beat)
    stack.callback(worker.stop)
    worker.wait_ready(60)
    cookie = session_cookie(web.url)
    csrf = re.search(r"csrftoken=([^;]+)", cookie)[1]  # type: ignore[index]
    browser = httpx.Client(
        base_url=web.url, timeout=30,
        headers={"Cookie": cookie, "X-CSRFToken": csrf, "Referer": f"{web.url}/approvals/"},
    )  # fmt: skip
    stack.callback(browser.close)
    api = httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    stack.callback(api.close)
    return FaultSite(web, worker, token, browser, csrf, api, worker_env)


class AgentRun:
    """``agent`` on a thread of its own, posting to ``site`` through the SDK (with its
    retries and spool) until ``finish``."""

    def __init__(self, site: FaultSite, timeout: float, spool: Path | None = None) -> None:
        self.store = SagaboardStore(
            site.web.url, site.token, flush_interval=0.02, timeout=timeout, spool=spool
        )
        self.stop, self.done = threading.Event(), list[str]()
        self.thread = threading.Thread(target=agent, args=(self.store, self.stop, self.done))
        self.thread.start()

    def finish(self, flush_timeout: float) -> list[str]:
        """Stop the agent, wait for every event it spooled to be delivered; its saga ids."""
        self.stop.set()
        self.thread.join(timeout=60)
        self.store.flush(timeout=flush_timeout)
        assert self.store.stats()["queued"] == 0, self.store.stats()
        self.store.close(timeout=10)
        return self.done

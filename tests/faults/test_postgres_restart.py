"""PostgreSQL restarted under load: requests fail with 503 + Retry-After (never 500), the SDK
keeps what it could not send and delivers it after, workers carry on, nothing is half-applied.

A PostgreSQL cluster of the test's own (the machine's server serves every other test),
the demo loaded; one web process and one worker with its beat on a Redis of the test's
own; an agent mirroring sagas through the SDK the whole time. Just before the database
goes down, an operator approves the demo's waiting refund, so its undo is queued or
running when the connection is cut. The database is stopped (fast shutdown: every
session cut, as in a restart or a fail-over) for ``SAGABOARD_FAULT_OUTAGE_SECONDS`` (10 s
here, 30 s under ``make faults``), during which pages, the API and ``/healthz`` must
answer 503 quickly, then started again.

Afterwards: every agent saga is stored, each event once (the engine's ``seq`` is 1..n per
saga, which ``sagaboard_verify``'s replay checks); the approved undo ran exactly once and
its saga ended ROLLED_BACK; ``sagaboard_verify`` and ``--audit`` pass.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.fault_agents import (
    PENDING,
    AgentRun,
    assert_record_verifies,
    read,
    rolled_back,
    saga_status,
    start_site,
    undos_ran_once,
)
from tests.support.fault_services import PostgresCluster, RedisProcess

pytestmark = pytest.mark.slow  # a PostgreSQL cluster, servers and a worker of its own

OUTAGE = float(os.environ.get("SAGABOARD_FAULT_OUTAGE_SECONDS", "10"))
WAIT = 120.0


def test_postgres_restarted_under_load_answers_503_and_loses_nothing(tmp_path: Path) -> None:
    with ExitStack() as stack:
        pg = stack.enter_context(PostgresCluster())
        redis = stack.enter_context(RedisProcess())
        url = pg.url
        site = start_site(stack, url, redis.url, tmp_path)
        worker, browser, api = site.worker, site.browser, site.api
        waiting = read(url, PENDING)

        agents = AgentRun(site, timeout=10)
        time.sleep(1.0)
        decided = site.decide(waiting["id"], "just before the restart")
        assert decided.status_code == 302, decided.text[:300]

        # ---------------------------------------------------------------- the database away
        pg.stop()
        down_at = time.monotonic()
        answers: dict[str, set[int]] = {}
        slowest = 0.0
        batch = json.dumps({"events": []})
        while time.monotonic() - down_at < OUTAGE:
            for method, path, client in (
                ("GET", "/", browser), ("GET", "/approvals/", browser),
                ("GET", "/api/v1/sagas", api), ("GET", "/healthz", api),
                ("POST", "/api/v1/events", api),
            ):  # fmt: skip
                began = time.monotonic()
                answer = client.request(method, path, content=batch if method == "POST" else None)
                slowest = max(slowest, time.monotonic() - began)
                answers.setdefault(path, set()).add(answer.status_code)
                if answer.status_code == 503 and path != "/healthz":
                    assert answer.headers["Retry-After"].isdigit(), path
            time.sleep(0.5)
        assert all(500 not in codes for codes in answers.values()), answers
        assert all(503 in codes for codes in answers.values()), answers
        spooled = agents.store.stats()

        # ---------------------------------------------------------------- back
        pg.start()
        back_at = time.monotonic()
        time.sleep(2.0)  # the agent goes on a little with the database back
        done = agents.finish(flush_timeout=90)
        drained_after = time.monotonic() - back_at

        rolled_back(api, waiting["saga_id"], worker, WAIT)
        undone_after = time.monotonic() - back_at
        undos_ran_once(url, waiting["saga_id"])

        for agent_saga in done:
            assert saga_status(api, agent_saga) == "COMPLETED", agent_saga
        assert_record_verifies(url)
    print(
        f"\nPostgreSQL down {OUTAGE:.0f} s: answers {answers}; slowest {slowest * 1000:.0f} ms; "
        f"SDK during the outage {spooled}; everything delivered {drained_after:.1f} s and the "
        f"undo done {undone_after:.1f} s after the database returned; {len(done)} agent sagas"
    )

"""Redis (the channel layer, the cache and the Celery broker) stopped while people and agents
work, then started again, empty: nothing is lost and nothing is shown falsely.

Real processes on this machine: a Redis of the test's own (the shared one serves other
runs), a throw-away database of the suite's kind with the demo loaded, one web process and
one worker with its beat, all on that Redis; an agent mirroring sagas through the SDK the
whole time; an operator working through the web.

While Redis is down (``SAGABOARD_FAULT_OUTAGE_SECONDS``, 10 s here, 30 s under
``make faults``):

* every page an operator opens answers 200, and a new login works (the cache falls back
  to the process's memory: sagaboard/infra/fallback_cache.py);
* the operator approves the demo's waiting refund: the decision is stored and the page
  says so (302 back to the queue), although its undo cannot be queued (the broker is
  down): the sweep queues it once Redis is back;
* the agent's events keep being accepted (the API needs only the database).

After Redis is back: the approved undo runs exactly once and the saga ends ROLLED_BACK,
every agent event was acknowledged and stored once, ``sagaboard_verify`` replays every
saga to its stored record, and ``sagaboard_verify --audit`` finds every chain unbroken.
The numbers (how long the undo took after Redis returned, the slowest request during
the outage) are printed for docs/operations.md.
"""

from __future__ import annotations

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
from tests.support.fault_services import RedisProcess
from tests.support.live_server import session_cookie, temp_database

pytestmark = pytest.mark.slow  # real servers, a worker and a Redis of its own

KIND = "postgres" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"
OUTAGE = float(os.environ.get("SAGABOARD_FAULT_OUTAGE_SECONDS", "10"))
WAIT = 90.0


def test_redis_down_and_back_loses_nothing_and_never_answers_500(tmp_path: Path) -> None:
    with ExitStack() as stack:
        redis = stack.enter_context(RedisProcess())
        url = stack.enter_context(temp_database(KIND, tmp_path))
        site = start_site(stack, url, redis.url, tmp_path)
        web, worker, browser, api = site.web, site.worker, site.browser, site.api
        waiting = read(url, PENDING)

        agents = AgentRun(site, timeout=30)
        time.sleep(1.0)

        # ---------------------------------------------------------------- Redis away
        redis.stop()
        down_at = time.monotonic()
        slowest = 0.0
        pages = ["/", "/approvals/", "/attention/", "/audit/", f"/sagas/demo/{waiting['saga_id']}/"]
        while time.monotonic() - down_at < OUTAGE:
            for page in pages:
                began = time.monotonic()
                answer = browser.get(page)
                slowest = max(slowest, time.monotonic() - began)
                assert answer.status_code == 200, (page, answer.status_code, answer.text[:300])
            time.sleep(0.5)
            if "approved" not in locals():
                decided = site.decide(waiting["id"], "approved while Redis was down")
                assert decided.status_code == 302, (decided.status_code, decided.text[:300])
                approved = time.monotonic()
                fresh = session_cookie(web.url)  # a new login, its rate limit counted locally
                assert "sessionid=" in fresh
        assert "approved" in locals(), "the outage ended before the approval was tried"
        assert api.get(f"/api/v1/approvals/{waiting['id']}").json()["status"] == "APPROVED"

        # ---------------------------------------------------------------- Redis back
        redis.start()
        back_at = time.monotonic()
        done = agents.finish(flush_timeout=60)

        rolled_back(api, waiting["saga_id"], worker, WAIT)
        undone_after = time.monotonic() - back_at
        undos_ran_once(url, waiting["saga_id"])

        for saga_id in done:
            assert saga_status(api, saga_id) == "COMPLETED", saga_id
        assert_record_verifies(url)
    print(
        f"\nRedis down {OUTAGE:.0f} s: slowest page {slowest * 1000:.0f} ms; approved "
        f"{approved - down_at:.1f} s into the outage; undo done {undone_after:.1f} s after "
        f"Redis returned; {len(done)} agent sagas, all stored"
    )

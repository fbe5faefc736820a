"""The embedded default's SQLite file on a disk that fills up while people and agents work,
then gets its space back: clear refusals (never a 500), nothing corrupted, nothing lost.

Real processes on this machine: the database file on a size-limited filesystem of the
test's own (``SmallDisk``: a tmpfs, filled to the last byte by a ballast file, so every
write SQLite makes fails with ENOSPC for real), one web process and one worker with its
beat, an agent mirroring sagas through the SDK the whole time, an operator in the web.

While the disk is full:

* the API answers new events with 507, a JSON body saying the disk is full and that
  nothing was applied, and ``Retry-After`` (the SDK keeps the events in its spool, on
  the agent's own disk, and retries);
* pages still answer 200 (reads need no space), and an operator's approval is refused
  with 507 and a page saying the disk is full: the approval stays pending, not half-made;
* the worker and its beat, whose writes fail too, stay up.

After the ballast is removed: ``PRAGMA integrity_check`` is "ok", the agent's events all
arrive (each once: ``sagaboard_verify`` replays every saga), the approval made again runs
its undo once, and the audit chain verifies.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.agent_runs import storebot_events
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
from tests.support.fault_services import RedisProcess, SmallDisk

pytestmark = [
    pytest.mark.slow,  # real servers, a worker, a Redis and a filesystem of its own
    pytest.mark.skipif(
        os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason="the embedded default's SQLite file (a PostgreSQL disk is the server's)",
    ),
]

DISK_MB = 32
WAIT = 90.0
RETRY_AFTER = 3


def test_a_full_disk_is_refused_clearly_corrupts_nothing_and_recovers(tmp_path: Path) -> None:
    with ExitStack() as stack:
        disk = stack.enter_context(SmallDisk(tmp_path / "disk", DISK_MB))
        if why := disk.mount():
            if os.geteuid() != 0:  # mounting needs root: the machine's limit, not sagaboard's
                pytest.skip(why)
            pytest.fail(why)  # as root (CI), a mount that fails is a broken fault suite
        redis = stack.enter_context(RedisProcess())
        db = disk.path / "db.sqlite3"
        url = f"sqlite:///{db}"
        # The SDK waits what Retry-After says before it retries; an operator's setting.
        site = start_site(
            stack,
            url,
            redis.url,
            tmp_path,
            web_env={"SAGABOARD_DISK_FULL_RETRY_AFTER": str(RETRY_AFTER)},
        )
        browser, api = site.browser, site.api
        waiting = read(url, PENDING)
        agents = AgentRun(site, timeout=30, spool=tmp_path / "agent-spool.sqlite3")
        time.sleep(1.0)

        # ---------------------------------------------------------------- the disk full
        ballast = disk.fill()
        full_at = time.monotonic()
        refused, accepted = None, 0
        while refused is None:  # SQLite first reuses the space its WAL already holds
            assert time.monotonic() - full_at < 60, f"{accepted} sagas taken on a full disk"
            probe = {"events": storebot_events(f"probe-{accepted}")}
            answer = api.post("/api/v1/events", json=probe)
            if answer.status_code == 507:
                refused = answer
            else:
                assert answer.status_code == 200, (answer.status_code, answer.text[:300])
                accepted += 1
        body = refused.json()["error"]
        assert body["code"] == "insufficient_storage", body
        assert "disk is full" in body["message"] and "nothing was applied" in body["message"]
        assert refused.headers["Retry-After"] == str(RETRY_AFTER)

        for page in ("/", "/approvals/", f"/sagas/demo/{waiting['saga_id']}/", "/audit/"):
            shown = browser.get(page)
            assert shown.status_code == 200, (page, shown.status_code, shown.text[:300])
        decided = site.decide(waiting["id"], "approved on a full disk")
        assert decided.status_code == 507, (decided.status_code, decided.text[:300])
        assert "disk is full" in decided.text
        time.sleep(2.0)  # the agent, the worker and its beat meet the full disk too
        site.worker.check_alive()
        spooled = agents.store.stats()
        assert spooled["queued"] > 0, spooled  # the SDK holds what it could not deliver

        # ---------------------------------------------------------------- space again
        disk.free()
        freed_at = time.monotonic()
        with sqlite3.connect(db) as check:
            assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert read(url, PENDING)["id"] == waiting["id"]  # the refused approval: not half-made
        decided = site.decide(waiting["id"], "space is back")
        assert decided.status_code == 302, (decided.status_code, decided.text[:300])
        done = agents.finish(flush_timeout=WAIT)
        drained_after = time.monotonic() - freed_at

        rolled_back(api, waiting["saga_id"], site.worker, WAIT)
        undos_ran_once(url, waiting["saga_id"])
        for agent_saga in done:
            assert saga_status(api, agent_saga) == "COMPLETED", agent_saga
        assert_record_verifies(url)
    print(
        f"\nDisk full ({ballast / 1e6:.1f} MB of ballast): {accepted} sagas still taken before "
        f"the first 507; SDK while full {spooled}; everything delivered {drained_after:.1f} s "
        f"after space returned; {len(done)} agent sagas"
    )

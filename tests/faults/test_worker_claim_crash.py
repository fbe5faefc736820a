"""A Celery worker SIGKILLed after it claimed an approved undo and before the undo's own code
started: another worker and the beat's sweep finish the rollback, and every undo runs once.

Real processes on this machine: a Redis of the test's own, a throw-away database of the
suite's kind with the demo loaded, one web process, and a worker WITHOUT a beat whose
process carries a seam (``tests/support/claim_crash.py``, loaded by the test-only settings
``tests.support.claim_crash_settings``): the first call of ``undo_kinds.run``, which the
runner makes once the worker has taken the task, holds the saga's lease, has written the
step COMPENSATING and has checked the approval, SIGKILLs its own process before the undo
is entered. An agent mirrors sagas through the SDK the whole time.

The operator approves the demo's waiting refund in the web. The worker takes the undo and
dies at the seam: the saga is left COMPENSATING, its lease naming the dead process, the
refund's step COMPENSATING, the approval APPROVED, no attempt recorded, and the undo's
own code never entered. Its task stays unacknowledged in Redis (for the visibility
timeout, 15 minutes), so nothing redelivers it during the test.

A second worker with its beat is then started: the sweep lists the saga at once (its
lease holder is a dead process of this host), the worker takes it over and runs the
rest. Afterwards: the saga is ROLLED_BACK; each undo succeeded exactly once and its code
was entered exactly once in all (the refund's, which the dead worker had claimed, by
the second worker, with the same idempotency key); every agent saga is stored;
``sagaboard_verify`` replays every saga and ``--audit`` finds every chain unbroken. The
recovery time (kill to ROLLED_BACK) is printed for docs/operations.md.
"""

from __future__ import annotations

import json
import os
import signal
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

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
from tests.support.live_server import Worker, temp_database

pytestmark = pytest.mark.slow  # real servers, two workers and a Redis of its own

KIND = "postgres" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"
WAIT = 90.0

CLAIMED = (
    "import json; from sagaboard.models import Approval, CompensationAttempt, Saga; "
    "s = Saga.objects.get(saga_id='SAGA'); "
    "print(json.dumps({'status': s.status, 'owner': s.lease_owner, "
    "'steps': {t.step_id: t.state for t in s.steps.all()}, "
    "'approval': Approval.objects.get(pk=APPROVAL).status, "
    "'attempts': CompensationAttempt.objects.filter(step__saga=s).count()}))"
)


def test_a_worker_killed_between_claiming_an_approved_undo_and_running_it_loses_nothing(
    tmp_path: Path,
) -> None:
    claims = tmp_path / "claims"
    claims.mkdir()
    seam = {
        "DJANGO_SETTINGS_MODULE": "tests.support.claim_crash_settings",
        "SAGABOARD_CLAIM_DIR": str(claims),
        "SAGABOARD_CLAIM_KILL": "1",
    }
    with ExitStack() as stack:
        redis = stack.enter_context(RedisProcess())
        url = stack.enter_context(temp_database(KIND, tmp_path))
        site = start_site(stack, url, redis.url, tmp_path, worker_env=seam, beat=False)
        first, api = site.worker, site.api
        waiting = read(url, PENDING)
        saga_id = waiting["saga_id"]

        agents = AgentRun(site, timeout=30)
        time.sleep(1.0)
        decided = site.decide(waiting["id"], "approved, then the worker dies")
        assert decided.status_code == 302, (decided.status_code, decided.text[:300])

        # ---------------------------------------------------------------- killed at the seam
        deadline = time.monotonic() + WAIT
        while first.alive():
            assert time.monotonic() < deadline, f"the worker never took the undo:\n{first.tail()}"
            time.sleep(0.1)
        killed_at = time.monotonic()
        assert first.proc.returncode == -signal.SIGKILL, (first.proc.returncode, first.tail())
        assert (claims / "killed").read_text() == str(first.pid)
        left = read(url, CLAIMED.replace("SAGA", saga_id).replace("APPROVAL", str(waiting["id"])))
        assert left["status"] == "COMPENSATING", left
        assert left["owner"] and f":{first.pid}:" in left["owner"], left  # the dead worker's
        assert sorted(left["steps"].values()) == ["COMPENSATING", "COMPLETED", "FAILED"], left
        assert (left["approval"], left["attempts"]) == ("APPROVED", 0), left
        claimed = _calls(claims)
        assert [(c["event"], c["pid"]) for c in claimed] == [("claimed", first.pid)], claimed
        refund = claimed[0]
        assert left["steps"][refund["step"]] == "COMPENSATING", (left, refund)

        # ---------------------------------------------------------------- the next worker
        second = Worker("w2", {**site.worker_env, "SAGABOARD_CLAIM_KILL": "0"}, tmp_path, beat=True)
        stack.callback(second.stop)
        second.wait_ready(60)
        rolled_back(api, saga_id, second, WAIT)
        recovered = time.monotonic() - killed_at
        done = agents.finish(flush_timeout=60)

        ran = undos_ran_once(url, saga_id)
        calls = _calls(claims)
        entered = [(c["pid"], c["step"], c["key"]) for c in calls if c["event"] == "entered"]
        assert sorted(s for _, s, _ in entered) == sorted(ran), calls  # each undo's code once
        assert all(pid == second.pid for pid, _, _ in entered), calls  # none in the dead one
        assert (second.pid, refund["step"], refund["key"]) in entered, calls  # the same key
        for agent_saga in done:
            assert saga_status(api, agent_saga) == "COMPLETED", agent_saga
        assert_record_verifies(url)
    print(
        f"\nWorker killed between claiming the approved undo and running it: ROLLED_BACK "
        f"{recovered:.1f} s after the kill (a second worker and its beat started, the sweep "
        f"took the dead worker's saga over); each of {len(ran)} undos ran once; "
        f"{len(done)} agent sagas, all stored"
    )


def _calls(folder: Path) -> list[dict[str, Any]]:
    text = (folder / "calls.jsonl").read_text() if (folder / "calls.jsonl").exists() else ""
    return [json.loads(line) for line in text.splitlines() if line]

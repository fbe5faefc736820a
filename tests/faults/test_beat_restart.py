"""The beat (``celery -A sagaboard beat``, its own process, as production runs it) SIGKILLed and
restarted: what fell due while it was down is handled once, within one sweep interval of
its return, and nothing is done twice.

Real processes on this machine: a Redis of the test's own, a throw-away database of the
suite's kind with the demo loaded, one web process, one worker WITHOUT ``-B``, and the
beat on its own (``tests.support.fault_services.Beat``). The beat sends the sweep every
10 s (``sagaboard.config.celery``); it is killed once the worker has run one.

While it is down, a script on the site's database and settings (``LEFT_BEHIND``; it
queues no task: what it leaves is the sweep's to find):

* adds an approval policy (the refunds of one charge wait 4 s for a decision, then are
  rejected) and a saga sagaboard runs whose rollback stops at that refund's undo: its
  approval expires 4 s later, with nobody to expire it (only the sweep does);
* takes the lease of another such saga (an undo needing no approval) and dies holding it
  (SIGKILL): orphaned work, whose task is lost.

After the restart: the expiry is handled exactly once (one ``approval.expired`` audit
entry; one sweep in the worker's log reports it) and the expired undo is rejected, the
rest of its rollback run; the orphan is taken over and ROLLED_BACK, each undo once. The
first sweep comes one interval (10 s, +1 s of slack) after the beat's schedule is set up,
and the time from the restart to the expiry being handled is printed for
docs/operations.md. A second kill and restart, and the sweeps after it, add nothing: the
audit log, the undo attempts and the approvals are the same before and after. The daily
retention entry never runs at a start-up. ``sagaboard_verify`` and ``--audit`` pass.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support.fault_agents import (
    assert_record_verifies,
    read,
    rolled_back,
    saga_status,
    start_site,
)
from tests.support.fault_services import Beat, RedisProcess
from tests.support.live_server import ROOT, Worker, temp_database

pytestmark = pytest.mark.slow  # real servers, a worker, a beat and a Redis of its own

KIND = "postgres" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"
INTERVAL = 10.0  # the sweep's schedule (sagaboard.config.celery)
EXPIRES = 4  # the policy's timeout_seconds
WAIT = 60.0

# Run while the beat is down, then SIGKILLed by itself while it holds the orphan's lease.
LEFT_BEHIND = f"""
import json, os, signal, django
django.setup()
from django.utils import timezone
from sagaboard.demo.flows import storebot_server_saga
from sagaboard.actions.services import runner
from sagaboard.infra import jobs
from sagaboard.models import Approval, ApprovalPolicy, Project

jobs._enqueue_committed = lambda *args: None  # its tasks are lost: the sweep must find the work
project = Project.objects.get(slug="demo")
ApprovalPolicy.objects.create(
    project=project, name="ch_901's refunds wait {EXPIRES} s", tool_glob="refund_payment",
    condition='input.chargeId == "ch_901"', timeout_seconds={EXPIRES}, on_expiry="reject",
)
expiring = storebot_server_saga(project, "beat-expiring", item="901")
assert runner.rollback_continue(expiring.pk) == "COMPENSATING"  # stops at the refund's approval
approval = Approval.objects.get(saga=expiring, status="PENDING")
orphan = storebot_server_saga(project, "beat-orphan", refund_needs_approval=False, item="902")
print(json.dumps({{
    "approval": approval.pk, "policy": approval.policy_snapshot,
    "expires_in": (approval.expires_at - timezone.now()).total_seconds(),
}}), flush=True)
with runner.attached(orphan):  # the lease taken, then the process dies holding it
    os.kill(os.getpid(), signal.SIGKILL)
"""

STATE = (
    "import json; from django.utils import timezone; "
    "from sagaboard.models import Approval, AuditEntry as E, CompensationAttempt as C, Saga; "
    "a = Approval.objects.get(pk=APPROVAL); o = Saga.objects.get(saga_id='beat-orphan'); "
    "print(json.dumps({'approval': a.status, 'due': a.expires_at <= timezone.now(), "
    "'expiry': [e.action for e in E.objects.filter(action__startswith='approval.') "
    "if e.data.get('approval') == a.pk and e.action in ('approval.expired', "
    "'approval.escalated')], 'orphan': o.status, 'orphan_owner': o.lease_owner, "
    "'audit': E.objects.count(), 'attempts': C.objects.count(), "
    "'approvals': sorted(Approval.objects.values_list('pk', 'status')), "
    "'ran': {saga: sorted(C.objects.filter(step__saga__saga_id=saga, outcome='succeeded')"
    ".values_list('step__tool_name', flat=True)) for saga in ('beat-expiring', 'beat-orphan')}}))"
)
"""The approval's, the orphan's and the whole record's state: audit entries, undo attempts
(and which undos succeeded, per saga), every approval's status."""


def test_a_killed_beat_handles_what_fell_due_once_after_its_restart_and_nothing_twice(
    tmp_path: Path,
) -> None:
    with ExitStack() as stack:
        redis = stack.enter_context(RedisProcess())
        url = stack.enter_context(temp_database(KIND, tmp_path))
        site = start_site(stack, url, redis.url, tmp_path, beat=False)  # the worker: no -B
        api, worker = site.api, site.worker
        beat = Beat(site.worker_env, tmp_path)
        stack.callback(beat.stop)
        beat.start()
        _until(lambda: _sweeps(worker), "the beat's first sweep to run", worker, beat)

        # ---------------------------------------------------------------- the beat killed
        beat.kill()
        left = _left_behind(url)
        assert left["policy"]["on_expiry"] == "reject", left
        time.sleep(max(0.0, left["expires_in"]) + 0.5)  # until the approval is past due
        state = read(url, STATE.replace("APPROVAL", str(left["approval"])))
        assert state["due"] and state["approval"] == "PENDING" and state["expiry"] == [], state
        assert state["orphan"] == "COMPENSATING" and state["orphan_owner"], state  # a dead holder

        # ---------------------------------------------------------------- the beat back
        restarted = time.monotonic()
        beat.start()
        expired = f"/api/v1/approvals/{left['approval']}"
        _until(lambda: api.get(expired).json()["status"] == "EXPIRED", "the expiry", worker, beat)
        handled_after = time.monotonic() - restarted
        first_sweep = _first_sweep_after_start(beat)
        assert first_sweep <= INTERVAL + 1.0, (first_sweep, beat.tail())
        rolled_back(api, "beat-orphan", worker, WAIT)
        orphan_after = time.monotonic() - restarted
        _until(lambda: saga_status(api, "beat-expiring") != "COMPENSATING", "the expired "
               "undo's saga to settle", worker, beat)  # fmt: skip
        expiring = api.get("/api/v1/sagas/beat-expiring").json()
        states = {s["tool_name"]: s["state"] for s in expiring["steps"]}
        assert expiring["status"] == "ROLLED_BACK", expiring  # with the refund left: rejected
        assert states == {"return_item": "ROLLED_BACK", "refund_payment": "REJECTED",
                          "generate_label": "FAILED"}, states  # fmt: skip
        before = read(url, STATE.replace("APPROVAL", str(left["approval"])))
        assert before["expiry"] == ["approval.expired"], before
        assert before["ran"] == {
            "beat-expiring": ["return_item"],  # the refund's undo rejected, the return's once
            "beat-orphan": ["refund_payment", "return_item"],  # each undo once
        }, before

        # ---------------------------------------------------------------- again: nothing twice
        sweeps = len(_sweeps(worker))
        beat.kill()
        beat.start()
        _until(lambda: len(_sweeps(worker)) > sweeps, "a sweep of the restarted beat", worker,
               beat)  # fmt: skip
        assert _first_sweep_after_start(beat) <= INTERVAL + 1.0, beat.tail()
        after = read(url, STATE.replace("APPROVAL", str(left["approval"])))
        assert after == before, (before, after)
        done = _sweeps(worker)
        assert sum(s["expired"] for s in done) == 1, done  # one sweep handled the expiry
        sent = {name for _, name in beat.sent(latest=False)}
        assert sent <= {"sweep", "tool-rollup"}, (sent, beat.tail())  # no retention at a start
        assert "retention_sweep[" not in worker.tail(10_000_000)
        assert_record_verifies(url)
    print(
        f"\nBeat SIGKILLed and restarted: the approval that expired while it was down was "
        f"handled {handled_after:.1f} s after the restart (first sweep {first_sweep:.1f} s "
        f"after its schedule was set up), once; the orphaned saga ROLLED_BACK "
        f"{orphan_after:.1f} s after the restart, each undo once; the expired undo's saga "
        f"{expiring['status']} ({states}); a second restart and {len(done) - sweeps} more "
        f"sweep(s) changed nothing"
    )


def _left_behind(url: str) -> dict[str, Any]:
    """Run ``LEFT_BEHIND`` as the site's processes would (its database, its settings)."""
    env = {
        **os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "sagaboard.config.settings",
        "SAGABOARD_COMPENSATION_MODULES": "sagaboard.demo.compensations",
    }  # fmt: skip
    died = subprocess.run(
        [sys.executable, "-c", LEFT_BEHIND], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert died.returncode == -signal.SIGKILL, (died.returncode, died.stderr[-3000:])
    return dict(json.loads(died.stdout.splitlines()[-1]))


SWEPT = re.compile(r"sagaboard\.tasks\.sweep\[[^\]]+\] succeeded in [\d.e-]+s: (\{[^\n]*\})")


def _sweeps(worker: Worker) -> list[dict[str, int]]:
    """The results of every sweep the worker ran, from its log."""
    return [ast.literal_eval(found) for found in SWEPT.findall(worker.tail(10_000_000))]


def _first_sweep_after_start(beat: Beat) -> float:
    """Seconds from the latest start's schedule set-up to its first sweep sent."""
    sent = [at for at, name in beat.sent() if name == "sweep"]
    assert sent, beat.tail()
    return (sent[0] - beat.started_at()).total_seconds()


def _until(condition: Any, what: str, worker: Worker, beat: Beat) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        worker.check_alive()
        assert beat.alive(), f"the beat exited:\n{beat.tail()}"
        assert time.monotonic() < deadline, f"no {what} in {WAIT:g} s:\n{beat.tail()}"
        time.sleep(0.2)

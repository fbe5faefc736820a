"""The fault suite's people and agents: an agent mirroring sagas, and reads of the database
the servers under test use (through ``manage.py shell``, as an operator would)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from tests.support.live_server import manage
from undo_core import Saga, define_tool
from undo_core.remote import SagaboardStore

__all__ = ["ATTEMPTS", "PENDING", "agent", "read"]

TOOLS = [define_tool(f"fault_tool_{n}", lambda i: {"ok": i}, lambda o, i: None) for n in range(3)]


PENDING = (
    "import json; from sagaboard.models import Approval; "
    "a = Approval.objects.select_related('saga').get(status='PENDING'); "
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

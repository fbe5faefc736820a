"""An agent in its own process that runs a long saga and stops when an operator asks.

    SAGABOARD_TOKEN=sgb_... python tests/e2e/stop_agent.py URL SAGA_ID UNDO_LOG

Runs up to 40 steps of ``work`` (0.25 s each), printing ``done step-N <unix time>`` after each. When
an operator requests the rollback on the dashboard, the SDK hears it and the engine
undoes the completed steps newest first (each undo appends its step id to UNDO_LOG);
it prints ``rolled back <ids>`` (newest first) and ``by <who>: <reason>``, then exits 0.
Running all 40 steps without hearing anything exits 3.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from undo_core import RollbackRequestedError, Saga, UndoContext, define_tool
from undo_core.remote import SagaboardStore


def main(url: str, saga_id: str, undo_log: Path) -> int:
    def work(i: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.25)
        return {"n": i["n"]}

    def undo(out: Any, i: Any, ctx: UndoContext) -> None:
        with undo_log.open("a") as f:
            f.write(f"{ctx.step_id}\n")

    tool = define_tool("work", work, undo)
    with SagaboardStore(url, os.environ["SAGABOARD_TOKEN"], rollback_poll=0.2) as store:
        saga = Saga("long-run", store=store, saga_id=saga_id)
        try:
            for n in range(1, 41):
                saga.execute(tool, {"n": n})
                print(f"done step-{n} {time.time():.3f}", flush=True)
        except RollbackRequestedError as stopped:
            print(f"rolled back {' '.join(stopped.rolled_back)}", flush=True)
            print(f"by {stopped.requested_by}: {stopped.reason}", flush=True)
            return 0 if store.flush(timeout=30) else 4
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))

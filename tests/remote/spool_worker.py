"""A process for the SIGKILL test: mirrors a saga to a sagaboard that is down, with a spool.

Usage: python spool_worker.py SPOOL_PATH MARKER_PATH

Runs the StoreBot saga (return_item, refund_payment, generate_label fails ->
rollback) with ``SagaboardStore(spool=SPOOL_PATH)`` whose transport always
refuses the connection, so nothing can be sent. Once the saga has ended (every
``apply`` returned) it writes the saga id to MARKER_PATH (atomically, by
rename) and blocks until the test kills it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from undo_core import Saga, SagaRollbackError, define_tool
from undo_core.remote import SagaboardStore

BLOCK_SECONDS = 60.0  # far longer than the test waits: it kills the process first


def refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def fail(inp: Any) -> None:
    raise RuntimeError("FedEx API returned 500")


def main() -> None:
    spool, marker = sys.argv[1], Path(sys.argv[2])
    store = SagaboardStore(
        "https://sagaboard.test", "t", spool=spool, transport=httpx.MockTransport(refuse)
    )
    saga = Saga("storebot-return", store=store)
    saga.execute(define_tool("return_item", lambda i: {"ok": 1}, lambda o, i: None), {"id": 1})
    saga.execute(define_tool("refund_payment", lambda i: {"re": 1}, lambda o: None), {"ch": 2})
    with contextlib.suppress(SagaRollbackError):
        saga.execute(define_tool("generate_label", fail), {"order": 3})
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(saga.id)
    tmp.rename(marker)
    time.sleep(BLOCK_SECONDS)


if __name__ == "__main__":
    main()

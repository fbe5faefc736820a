"""An agent in its own process for the browser tests: it runs a saga through the SDK
(``undo_core.remote.SagaboardStore``) against a live sagaboard, one step at a time.

    SAGABOARD_TOKEN=sgb_... python tests/e2e/agent.py URL SAGA_ID {storebot,xss}

At each checkpoint it flushes (every event so far is on the server), prints
``at <checkpoint>`` and waits for a line on stdin, so the test decides the pace and
can look at the browser between two steps. It prints ``done`` when everything is sent.

``storebot``: the seed's StoreBot return. A decoy saga of another name first (it must
not reach a filtered list), then return_item, refund_payment, generate_label fails and
both earlier steps are undone (the first undo waits at a checkpoint: mid-rollback).

``xss``: a saga whose name, step input, output and error carry script and image payloads.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from undo_core import Saga, SagaRollbackError, define_tool
from undo_core.remote import SagaboardStore

SCRIPT = "<script>window.__xss=1</script>"
IMG = '<img src=x onerror="window.__xss=1">'


def checkpoint(store: SagaboardStore, name: str) -> None:
    if not store.flush(timeout=30):
        raise SystemExit(f"events not delivered before {name}")
    print(f"at {name}", flush=True)
    if not sys.stdin.readline():
        raise SystemExit("the test went away")


def storebot(store: SagaboardStore, saga_id: str) -> None:
    decoy = Saga("checkout-flow", store=store, saga_id=f"{saga_id}-decoy")
    decoy.execute(define_tool("deduct_inventory", lambda i: {"qty": 1}), {"sku": "abc"})
    decoy.complete()

    def undo_refund(out: Any) -> None:
        checkpoint(store, "undoing")  # generate_label failed, refund_payment being undone

    ret = define_tool("return_item", lambda i: {"item": i["itemId"]}, lambda o, i: None)
    ref = define_tool("refund_payment", lambda i: {"id": "re_1"}, undo_refund)

    def fedex(i: Any) -> None:
        raise ConnectionError("FedEx API returned 500")

    saga = Saga("storebot-return", store=store, saga_id=saga_id)  # stored from its 1st step
    saga.execute(ret, {"itemId": "882"})
    checkpoint(store, "return_item")
    saga.execute(ref, {"chargeId": "ch_123"})
    checkpoint(store, "refund_payment")
    try:
        saga.execute(define_tool("generate_label", fedex), {"orderId": "o-1"})
    except SagaRollbackError:
        checkpoint(store, "rolled_back")
    else:
        raise SystemExit("generate_label did not fail")


def xss(store: SagaboardStore, saga_id: str) -> None:
    payload = {"script": SCRIPT, "img": IMG}
    echo = define_tool("echo", lambda i: dict(i), lambda o, i: None)

    def fails(i: Any) -> None:
        raise ConnectionError(SCRIPT + IMG)

    saga = Saga(f"xss {SCRIPT}{IMG}", store=store, saga_id=saga_id)
    saga.execute(echo, payload)
    checkpoint(store, "echo")
    try:
        saga.execute(define_tool("send_note", fails), payload)
    except SagaRollbackError:
        checkpoint(store, "rolled_back")
    else:
        raise SystemExit("send_note did not fail")


def main() -> None:
    url, saga_id, scenario = sys.argv[1:4]
    run = {"storebot": storebot, "xss": xss}[scenario]
    with SagaboardStore(url, os.environ["SAGABOARD_TOKEN"], flush_interval=0.01) as store:
        run(store, saga_id)
        if not store.flush(timeout=30):
            raise SystemExit("events not delivered")
    print("done", flush=True)


if __name__ == "__main__":
    main()

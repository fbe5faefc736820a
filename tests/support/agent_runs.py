"""Agent runs recorded as the SDK would send them, for the API tests, and their POST."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from undo_core import Decision, MemoryStore, SagaChange, SagaRollbackError, define_tool
from undo_core import Saga as LocalSaga
from undo_core.remote import change_to_event


class Recorder(MemoryStore):
    """A MemoryStore that also keeps every change as the SDK would send it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict[str, Any]] = []

    def apply(self, change: SagaChange) -> None:
        super().apply(change)
        self.sent.append(change_to_event(change))


def post_events(client: Client, token: str, events: list[dict[str, Any]]) -> Any:
    """``POST /api/v1/events`` as the SDK sends it, with ``token``'s bearer header."""
    return client.post(
        "/api/v1/events",
        json.dumps({"events": events}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )


def storebot_events(saga_id: str = "storebot-1") -> list[dict[str, Any]]:
    """The seed's StoreBot run: return_item, refund_payment, generate_label fails."""
    store = Recorder()
    saga = LocalSaga("storebot-return", store=store, saga_id=saga_id)
    ret = define_tool("return_item", lambda i: {"item": i["itemId"]}, lambda o, i: None)
    ref = define_tool("refund_payment", lambda i: {"id": "re_1"}, lambda o: None)

    def fedex(i: Any) -> None:
        raise ConnectionError("FedEx API returned 500")

    saga.execute(ret, {"itemId": "882"})
    saga.execute(ref, {"chargeId": "ch_123"})
    with pytest.raises(SagaRollbackError):
        saga.execute(define_tool("generate_label", fedex), {"orderId": "o-1"})
    return store.sent


class Paused:
    """The agent's gate when nobody decides: its rollback waits at an approval, or halts on
    the failed undo, leaving the saga for a person on sagaboard."""

    def approve_compensation(self, request: Any) -> Decision:
        return Decision.wait()

    def compensation_failed(self, request: Any) -> Decision:
        return Decision.leave()


def paused_storebot_events(
    saga_id: str, *, refund_approval: bool, return_undo_fails: bool
) -> list[dict[str, Any]]:
    """StoreBot in the agent, as the SDK mirrors it: return_item, refund_payment, then
    generate_label fails; the rollback stops for a person (approval or failed undo)."""
    store = Recorder()
    saga = LocalSaga(
        "storebot-return",
        store=store,
        saga_id=saga_id,
        gate=Paused(),
        on_compensation_failure="halt",
    )

    def undo_return(output: Any, input: Any) -> None:
        if return_undo_fails:
            raise TimeoutError("upstream timed out")

    def fedex(i: Any) -> None:
        raise ConnectionError("FedEx API returned 500")

    ret = define_tool("return_item", lambda i: {"rma": "RMA-882"}, undo_return)
    ref = define_tool(
        "refund_payment",
        lambda i: {"refund": "re_1"},
        lambda o: None,
        requires_approval=refund_approval,
    )
    saga.execute(ret, {"order": "A-17"})
    saga.execute(ref, {"amount": 120, "currency": "EUR"})
    with pytest.raises(SagaRollbackError):
        saga.execute(define_tool("generate_label", fedex), {})
    return store.sent

"""End to end: a real ASGI server process, and an agent mirroring StoreBot to it with the SDK.

The server runs on its own database (a SQLite file, or a fresh PostgreSQL database
when the suite runs on PostgreSQL), set up with the real management commands
(``tests.support.live_server``, shared with the ingestion benchmark).
Everything is checked through the public API, as a user of the dashboard would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.live_server import ROOT, Server, prepare, temp_database
from undo_core import Saga, SagaRollbackError, define_tool
from undo_core.remote import SagaboardClient, SagaboardStore

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Server, str]]:
    with temp_database("postgres" if PG else "sqlite", tmp_path) as url:
        token = prepare(url)
        with Server(url) as srv:
            yield srv, token
        # What the SDK sent replays from the event log to exactly the stored record.
        verified = subprocess.run(
            [sys.executable, "manage.py", "sagaboard_verify"], cwd=ROOT, capture_output=True,
            text=True, timeout=120, env={**os.environ, "DATABASE_URL": url},
        )  # fmt: skip
        assert verified.returncode == 0, verified.stdout[-4000:] + verified.stderr[-4000:]


def storebot_tools(undo_log: list[str]) -> tuple[Any, Any, Any]:
    ret = define_tool(
        "return_item",
        lambda i: {"item": i["itemId"], "status": "returned"},
        lambda out, i: undo_log.append("return_item"),
    )
    ref = define_tool(
        "refund_payment",
        lambda i: {"id": "re_1", "charge": i["chargeId"]},
        lambda out: undo_log.append("refund_payment"),
    )

    def fedex(i: Any) -> None:
        raise ConnectionError("FedEx API returned 500")

    return ret, ref, define_tool("generate_label", fedex)


def assert_storebot_on_server(url: str, token: str, saga_id: str, local_events: int) -> None:
    with SagaboardClient(url, token) as client:
        saga = client.get_saga(saga_id)
        assert saga["status"] == "ROLLED_BACK"
        assert [(s["tool_name"], s["state"]) for s in saga["steps"]] == [
            ("return_item", "ROLLED_BACK"),
            ("refund_payment", "ROLLED_BACK"),
            ("generate_label", "FAILED"),
        ]
        log = httpx.get(
            f"{url}/api/v1/sagas/{saga_id}/events",
            headers={"Authorization": f"Bearer {token}"},
            params={"limit": 1000},
        ).json()["items"]
    assert [e["seq"] for e in log] == list(range(1, local_events + 1)), "lost or duplicated"
    undone = [e["step_id"] for e in log if e["to_state"] == "ROLLED_BACK" and e["kind"] == "step"]
    assert undone == ["step-2", "step-1"]  # LIFO, as the agent ran them


def test_storebot_reaches_the_server_exactly_as_it_ran(server: tuple[Server, str]) -> None:
    srv, token = server
    undo_log: list[str] = []
    ret, ref, label = storebot_tools(undo_log)
    with SagaboardStore(srv.url, token, flush_interval=0.01) as store:
        saga = Saga("storebot-return", store=store)
        saga.execute(ret, {"itemId": "882"})
        saga.execute(ref, {"chargeId": "ch_123"})
        with pytest.raises(SagaRollbackError):
            saga.execute(label, {"orderId": "o-1"})
        assert store.flush(timeout=30)
    assert undo_log == ["refund_payment", "return_item"]
    assert_storebot_on_server(srv.url, token, saga.id, saga.snapshot().record.seq)


def test_events_sent_while_the_server_is_down_arrive_later_in_order_once(
    server: tuple[Server, str], tmp_path: Path
) -> None:
    srv, token = server
    undo_log: list[str] = []
    ret, ref, label = storebot_tools(undo_log)
    store = SagaboardStore(srv.url, token, flush_interval=0.01, spool=tmp_path / "spool.db")
    try:
        saga = Saga("storebot-return", store=store)
        saga.execute(ret, {"itemId": "882"})
        assert store.flush(timeout=30)

        srv.stop()  # the dashboard goes away mid-saga
        started = time.monotonic()
        saga.execute(ref, {"chargeId": "ch_123"})
        with pytest.raises(SagaRollbackError):
            saga.execute(label, {"orderId": "o-1"})
        assert time.monotonic() - started < 2, "the agent waited for the dashboard"
        assert not store.flush(timeout=0.5)  # nothing can be delivered now

        srv.start()
        assert store.flush(timeout=60)
    finally:
        store.close(timeout=10)
    assert undo_log == ["refund_payment", "return_item"]
    assert_storebot_on_server(srv.url, token, saga.id, saga.snapshot().record.seq)

"""End to end: one bad value never stops the SDK, against a real sagaboard server process.

The server runs on its own database (a SQLite file, or a fresh PostgreSQL database
when the suite runs on PostgreSQL), with a small ``SAGABOARD_MAX_VALUE_SIZE`` so a
real 422 for one event is cheap to provoke. Everything is checked through the API.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.live_server import Server, prepare, temp_database
from undo_core import Saga, SagaRollbackError, SerializationError, StoreError, define_tool
from undo_core.remote import SagaboardAPIError, SagaboardClient, SagaboardStore

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
MAX_VALUE = 4096
LONE = os.fsdecode(b"invoice-\x80.pdf")  # "invoice-\udc80.pdf": a file name that is not UTF-8


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    workdir = tmp_path_factory.mktemp("live")
    with temp_database("postgres" if PG else "sqlite", workdir) as url:
        token = prepare(url)
        with Server(url, env={"SAGABOARD_MAX_VALUE_SIZE": str(MAX_VALUE)}) as srv:
            yield srv.url, token


def send_file(x: Any) -> dict[str, Any]:
    return {"sent": x["path"]}


SEND = define_tool("send_file", send_file)
BIG = define_tool("render_report", lambda x: {"pdf": "x" * (MAX_VALUE + 1)})


def mail(store: SagaboardStore, path: str, tool: Any = SEND) -> str:
    saga = Saga("mail-invoices", store=store)
    saga.execute(tool, {"path": path})
    saga.complete()
    return saga.id


def on_server(url: str, token: str, saga_id: str) -> dict[str, Any]:
    with SagaboardClient(url, token) as client:
        return client.get_saga(saga_id)


@pytest.mark.parametrize("spool", [False, True], ids=["memory", "spool"])
def test_a_lone_surrogate_then_a_hundred_good_sagas_all_reach_the_server(
    server: tuple[str, str], tmp_path: Path, spool: bool
) -> None:
    url, token = server
    reports: list[tuple[dict[str, Any], StoreError]] = []
    with SagaboardStore(
        url,
        token,
        flush_interval=0.01,
        spool=tmp_path / "spool.db" if spool else None,
        on_error=lambda event, err: reports.append((event, err)),
    ) as store:
        with pytest.raises(SagaRollbackError) as caught:
            mail(store, LONE)
        good = [mail(store, f"invoice-{n}.pdf") for n in range(100)]
        assert store.flush(timeout=60) is True
        stats = store.stats()

    err = caught.value.cause
    assert isinstance(err, SerializationError)
    assert (err.saga_id, err.step_id, err.field) == (caught.value.saga_id, "step-1", "input")
    for saga_id in good:
        saga = on_server(url, token, saga_id)
        assert saga["status"] == "COMPLETED" and saga["steps"][0]["state"] == "COMPLETED"
    # The bad saga is on the server as the engine left it: rolled back, its step never stored.
    bad = on_server(url, token, caught.value.saga_id)
    assert bad["status"] == "ROLLED_BACK" and bad["steps"] == []
    ((event, reported),) = reports
    assert event["saga"]["id"] == caught.value.saga_id and reported is err
    assert stats["unencodable"] == 1 and stats["dropped_bad"] == 0 and stats["queued"] == 0


def test_an_event_the_server_refuses_is_isolated_and_the_other_sagas_arrive(
    server: tuple[str, str],
) -> None:
    url, token = server
    reports: list[tuple[dict[str, Any], StoreError]] = []
    with SagaboardStore(
        url,
        token,
        flush_interval=0.5,  # so the refused event travels in a batch with good ones
        on_error=lambda event, err: reports.append((event, err)),
    ) as store:
        before = [mail(store, f"before-{n}.pdf") for n in range(5)]
        refused = mail(store, "report.pdf", BIG)  # its output is over the server's limit
        after = [mail(store, f"after-{n}.pdf") for n in range(5)]
        assert store.flush(timeout=60) is True  # settled: delivered, or refused and reported
        stats = store.stats()

    for saga_id in before + after:
        assert on_server(url, token, saga_id)["status"] == "COMPLETED"
    ((event, err),) = reports
    assert isinstance(err, SagaboardAPIError) and err.status == 422
    assert event["event_id"] == f"{refused}:3" and "output" in (err.field or "")
    # What the server shows of it is true, up to the refused event: the step never completed.
    saga = on_server(url, token, refused)
    assert saga["status"] == "IN_PROGRESS" and saga["steps"][0]["state"] == "PENDING"
    assert stats["dropped_bad"] == 1 and stats["dropped_after_refusal"] == 1


def test_close_delivers_everything_queued(server: tuple[str, str]) -> None:
    url, token = server
    store = SagaboardStore(url, token, flush_interval=5.0, batch_size=1000)
    ids = [mail(store, f"late-{n}.pdf") for n in range(50)]
    assert store.stats()["queued"] == 200  # nothing sent yet: the sender lingers
    assert store.close(timeout=60) is True
    assert store.stats()["sent"] == 200 and store.stats()["lost"] == 0
    for saga_id in ids:
        assert on_server(url, token, saga_id)["status"] == "COMPLETED"

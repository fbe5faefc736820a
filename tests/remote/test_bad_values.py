"""One bad value never stops the SDK: it fails where it enters, and nothing waits behind it.

Against the fake sagaboard of conftest.py (the same contract runs against a real
server in tests/e2e/test_e2e_sdk_bad_values.py).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from undo_core import (
    Saga,
    SagaChange,
    SagaEvent,
    SagaRecord,
    SagaRollbackError,
    SagaStatus,
    SerializationError,
    SQLiteStore,
    StoreError,
    define_tool,
)
from undo_core.remote import SagaboardAPIError, SagaboardStore
from undo_core.vocabulary.records import EventKind

URL = "https://sagaboard.test"  # conftest's fake sagaboard
TOKEN = "sgb_ab12cd34_secret"

LONE = os.fsdecode(b"invoice-\x80.pdf")  # what a file name that is not UTF-8 decodes to
assert LONE == "invoice-\udc80.pdf"

STORES = ["sqlite", "sdk", "sdk-spool"]


def bulk_change(seq: int, saga_id: str = "bulk-1") -> SagaChange:
    """A saga-level transition, for tests that need events without running tools."""
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seq)
    record = SagaRecord(saga_id, "bulk", SagaStatus.IN_PROGRESS, at, at, seq=seq, lease_owner="me")
    from_state = None if seq == 1 else "IN_PROGRESS"
    event = SagaEvent(saga_id, "bulk", seq, EventKind.SAGA, "IN_PROGRESS", from_state, at)
    return SagaChange(record, None, event)


def ids_of(saga_id: str, count: int) -> list[str]:
    return [f"{saga_id}:{n}" for n in range(1, count + 1)]


def a_store(kind: str, make_store: Any, tmp_path: Path, **options: Any) -> Any:
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "sagas.sqlite3")
    if kind == "sdk-spool":
        options["spool"] = tmp_path / "spool.db"
    return make_store(**options)


def one_step_saga(store: Any, value: Any, *, calls: list[str] | None = None) -> Saga:
    """A saga that sends one file: ``value`` is its input."""
    calls = calls if calls is not None else []
    send = define_tool("send_file", lambda x: calls.append("send") or {"sent": True})
    saga = Saga("mail-invoices", store=store)
    saga.execute(send, value)
    saga.complete()
    return saga


@pytest.mark.parametrize("kind", STORES)
def test_a_lone_surrogate_input_fails_its_step_naming_saga_step_and_field(
    kind: str, make_store: Any, tmp_path: Path
) -> None:
    store = a_store(kind, make_store, tmp_path)
    calls: list[str] = []
    with pytest.raises(SagaRollbackError) as caught:
        one_step_saga(store, {"files": [LONE]}, calls=calls)

    err = caught.value.cause
    assert type(err) is SerializationError  # never a raw UnicodeEncodeError
    assert calls == [], "the tool ran with an input that could not be recorded"
    assert (err.step_id, err.field) == ("step-1", "input")
    assert err.saga_id == caught.value.saga_id
    message = str(err)
    assert message.startswith("input of step 'step-1' (send_file) of saga 'mail-invoices'")
    assert "input['files'][0] holds a lone surrogate '\\udc80'" in message
    assert caught.value.status == SagaStatus.ROLLED_BACK
    message.encode("utf-8")  # the error itself can be logged, stored and sent


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize(
    ("value", "where", "why"),
    [
        ({LONE: 1}, "the key 'invoice-\\udc80.pdf' in input", "lone surrogate"),
        ({"ratio": float("nan")}, "input['ratio'] is nan", "not JSON"),
        ([1, float("-inf")], "input[1] is -inf", "not JSON"),
        ({"when": {1, 2}}, "input['when'] is of type set", "not JSON"),
        ({("a", 1): 2}, "the key ('a', 1) in input", "JSON keys are strings"),
    ],
    ids=["surrogate-key", "nan", "infinity", "set", "tuple-key"],
)
def test_every_store_refuses_the_same_values_with_the_same_words(
    kind: str, value: Any, where: str, why: str, make_store: Any, tmp_path: Path
) -> None:
    store = a_store(kind, make_store, tmp_path)
    with pytest.raises(SagaRollbackError) as caught:
        one_step_saga(store, value)
    message = str(caught.value.cause)
    assert isinstance(caught.value.cause, SerializationError)
    assert where in message and why in message


@pytest.mark.parametrize("kind", STORES)
def test_a_lone_surrogate_output_is_refused_and_the_step_still_undone(
    kind: str, make_store: Any, tmp_path: Path
) -> None:
    undone: list[str] = []
    listing = define_tool(
        "list_dir", lambda x: {"names": [LONE]}, lambda out, x: undone.append("list_dir")
    )
    store = a_store(kind, make_store, tmp_path)
    saga = Saga("scan", store=store)
    with pytest.raises(SagaRollbackError) as caught:
        saga.execute(listing, {"dir": "/srv"})
    err = caught.value.cause
    assert isinstance(err, SerializationError) and err.field == "output"
    assert "output['names'][0] holds a lone surrogate" in str(err)
    assert undone == ["list_dir"]


@pytest.mark.parametrize("kind", STORES)
def test_a_failure_whose_message_holds_a_lone_surrogate_is_recorded_escaped(
    kind: str, make_store: Any, tmp_path: Path
) -> None:
    def open_it(x: Any) -> None:
        (tmp_path / LONE).read_bytes()  # the real error: a file name that is not UTF-8

    store = a_store(kind, make_store, tmp_path)
    saga = Saga("read", store=store)
    with pytest.raises(SagaRollbackError) as caught:
        saga.execute(define_tool("read_file", open_it), 1)
    assert isinstance(caught.value.cause, FileNotFoundError)
    if isinstance(store, SagaboardStore):
        assert store.flush(5)
    loaded = store.load(saga.id)
    assert loaded is not None and loaded.status is SagaStatus.ROLLED_BACK
    (step,) = loaded.steps
    assert step.error is not None and "invoice-\\udc80.pdf" in step.error
    assert step.traceback is not None and "FileNotFoundError" in step.traceback


def test_an_engine_counter_beyond_64_bits_is_refused_by_both_encoders(
    fake: Any, tmp_path: Path
) -> None:
    change = bulk_change(1)
    huge = change._replace(saga=change.saga._replace(next_step_number=2**63))
    refusal = r"next_step_number of saga 'bulk' \(id 'bulk-1'\) .* outside the 64-bit"
    with (
        SQLiteStore(tmp_path / "s.sqlite3") as store,
        pytest.raises(SerializationError, match=refusal),
    ):
        store.apply(huge)
    sdk = SagaboardStore(URL, TOKEN, transport=fake.transport())
    try:
        with pytest.raises(SerializationError, match=refusal):
            sdk.apply(huge)
    finally:
        sdk.close(timeout=1)


# ---------------------------------------------------------------- nothing waits behind it


@pytest.mark.parametrize("spool", [False, True], ids=["memory", "spool"])
def test_a_bad_value_then_a_hundred_good_sagas_all_arrive_and_on_error_hears_once(
    fake: Any,
    make_store: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    spool: bool,
) -> None:
    reports: list[tuple[str, StoreError]] = []
    options: dict[str, Any] = {"on_error": lambda e, err: reports.append((e["event_id"], err))}
    if spool:
        options["spool"] = tmp_path / "spool.db"
    store = make_store(**options)

    with caplog.at_level(logging.ERROR, logger="undo_core.remote"):
        with pytest.raises(SagaRollbackError) as caught:
            one_step_saga(store, {"path": LONE})
        bad_id = caught.value.saga_id
        good = [one_step_saga(store, {"path": f"invoice-{n}.pdf"}) for n in range(100)]
        assert store.flush(10) is True  # everything deliverable is delivered

    applied = fake.applied_ids()
    for saga in good:
        assert [i for i in applied if i.startswith(f"{saga.id}:")] == ids_of(saga.id, 4)
    # The bad saga as the engine left it: started, its step never written, rolled back.
    assert [e["event"]["to_state"] for e in fake.applied if e["saga"]["id"] == bad_id] == [
        "IN_PROGRESS",
        "COMPENSATING",
        "ROLLED_BACK",
    ]
    ((event_id, err),) = reports
    assert event_id.startswith(f"{bad_id}:")
    assert isinstance(err, SerializationError) and err.field == "input"
    assert "lone surrogate" in str(err) and err.saga_id == bad_id
    assert store.stats()["unencodable"] == 1 and store.stats()["queued"] == 0
    assert any(bad_id in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


def test_a_spool_row_that_is_not_utf8_is_reported_dropped_and_the_rest_arrive(
    fake: Any, make_store: Any, tmp_path: Path
) -> None:
    spool = tmp_path / "spool.db"
    fake.mode = "down"
    first = make_store(spool=spool)
    for seq in (1, 2):
        first.apply(bulk_change(seq))
    assert first.close(timeout=0.1) is False
    db = sqlite3.connect(spool)  # a row some other writer (or a damaged disk) left
    db.execute(
        "INSERT INTO sagaboard_spool (payload) VALUES (CAST(? AS TEXT))",
        (b'{"event_id":"other-1:1","saga":{"name":"\x80"}}',),
    )
    db.commit()
    db.close()
    fake.mode = "up"
    reports: list[tuple[str, StoreError]] = []
    second = make_store(spool=spool, on_error=lambda e, err: reports.append((e["event_id"], err)))
    second.apply(bulk_change(3))
    assert second.flush(5)
    assert fake.applied_ids() == ids_of("bulk-1", 3)
    ((event_id, err),) = reports
    assert event_id == "other-1:1" and isinstance(err, SerializationError)
    assert "['saga']['name'] holds a lone surrogate" in str(err)
    assert second.stats()["unencodable"] == 1


def test_an_event_the_sender_keeps_failing_on_is_tried_alone_then_dropped(
    fake: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if b'"event_id":"cursed-1:1"' in request.content:
            raise RuntimeError("a bug in the transport")  # not a network error
        return fake.handle(request)

    reports: list[tuple[str, StoreError]] = []
    store = SagaboardStore(
        URL,
        TOKEN,
        transport=httpx.MockTransport(handler),
        max_backoff=0.01,
        flush_interval=0.005,
        on_error=lambda e, err: reports.append((e["event_id"], err)),
    )
    try:
        fake.mode = "down"
        store.apply(bulk_change(1))
        store.apply(bulk_change(1, saga_id="cursed-1"))
        store.apply(bulk_change(2))
        fake.mode = "up"
        with caplog.at_level(logging.ERROR, logger="undo_core.remote"):
            assert store.flush(10)
    finally:
        store.close(timeout=1)
    assert fake.applied_ids() == ids_of("bulk-1", 2)
    ((event_id, err),) = reports
    assert event_id == "cursed-1:1" and "a bug in the transport" in str(err)
    assert store.stats()["dropped_failing"] == 1


# ---------------------------------------------------------------- flush and close


def test_close_delivers_what_is_queued_through_a_flaky_server(fake: Any) -> None:
    store = SagaboardStore(
        URL, TOKEN, transport=fake.transport(), flush_interval=5.0, max_backoff=0.02
    )
    for seq in range(1, 31):
        store.apply(bulk_change(seq))
    fake.fail_next("500", 3)
    fake.fail_next("down", 2)
    assert store.close(timeout=5) is True
    assert fake.applied_ids() == ids_of("bulk-1", 30)


def test_close_without_a_spool_reports_each_event_it_could_not_send(
    fake: Any, caplog: pytest.LogCaptureFixture
) -> None:
    reports: list[tuple[str, StoreError]] = []
    store = SagaboardStore(
        URL,
        TOKEN,
        transport=fake.transport(),
        max_backoff=0.02,
        on_error=lambda e, err: reports.append((e["event_id"], err)),
    )
    fake.mode = "down"
    for seq in range(1, 4):
        store.apply(bulk_change(seq))
    with caplog.at_level(logging.WARNING, logger="undo_core.remote"):
        assert store.close(timeout=0.2) is False
    assert [event_id for event_id, _ in reports] == ids_of("bulk-1", 3)
    assert all("closed before it could be" in str(err) for _, err in reports)
    assert store.stats()["lost"] == 3
    assert "3 event(s) for https://sagaboard.test were never sent" in caplog.text
    assert "bulk-1:1 to bulk-1:3" in caplog.text


def test_a_refusal_reaches_on_error_as_an_api_error_with_its_response(
    fake: Any, make_store: Any
) -> None:
    reports: list[StoreError] = []
    store = make_store(on_error=lambda e, err: reports.append(err))
    fake.reject = {"bulk-1:1"}
    store.apply(bulk_change(1))
    assert store.flush(5)
    (err,) = reports
    assert isinstance(err, SagaboardAPIError) and (err.status, err.field) == (409, None)
    assert err.response is not None and err.response.status_code == 409


def test_on_error_hears_of_a_bad_value_while_the_server_is_down(fake: Any, make_store: Any) -> None:
    reports: list[StoreError] = []
    store = make_store(on_error=lambda e, err: reports.append(err))
    fake.mode = "down"
    store.apply(bulk_change(1))
    deadline = time.monotonic() + 5
    while store.stats()["retried"] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # the sender is in its retry loop for this one
    with pytest.raises(SagaRollbackError):
        one_step_saga(store, {"path": LONE})
    deadline = time.monotonic() + 5
    while not reports and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(reports) == 1 and isinstance(reports[0], SerializationError)
    assert fake.applied == []  # still down: the news did not wait for it

"""SagaboardStore against the fake sagaboard: ordering, outages, batching, retries, spool."""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from undo_core import (
    AsyncSaga,
    LeaseError,
    MemoryStore,
    Saga,
    SagaChange,
    SagaEvent,
    SagaRecord,
    SagaRollbackError,
    SagaStatus,
    SagaStore,
    SerializationError,
    StepState,
    StoreError,
    Tool,
    define_tool,
)
from undo_core.remote import SagaboardStore, change_to_event
from undo_core.testing import FakeClock
from undo_core.vocabulary.records import EventKind

URL = "https://sagaboard.test"
TOKEN = "sgb_ab12cd34_secret"
ROOT = Path(__file__).resolve().parents[2]
STOREBOT_EVENTS = 13  # saga, 3 steps (PENDING + outcome), rollback of 2 steps, 2 saga moves


class FedExDown(Exception):
    pass


def storebot(calls: list[str], *, is_async: bool = False) -> tuple[Tool, Tool, Tool]:
    """The seed's StoreBot: return_item, refund_payment, generate_label (fails)."""

    def return_item(inp: dict[str, Any]) -> dict[str, Any]:
        calls.append("return_item")
        return {"item": inp["itemId"], "status": "returned"}

    def undo_return(out: Any, inp: dict[str, Any]) -> None:
        calls.append(f"undo:return_item:{inp['itemId']}")

    def refund(inp: dict[str, Any]) -> dict[str, Any]:
        calls.append("refund_payment")
        return {"id": "re_1", "charge": inp["chargeId"]}

    def undo_refund(out: dict[str, Any]) -> None:
        calls.append(f"undo:refund_payment:{out['id']}")

    def label(inp: Any) -> None:
        calls.append("generate_label")
        raise FedExDown("FedEx API returned 500")

    fns = [(return_item, undo_return), (refund, undo_refund), (label, None)]
    names = ["return_item", "refund_payment", "generate_label"]
    if is_async:
        fns = [(_async(do), _async(undo) if undo else None) for do, undo in fns]
    return tuple(define_tool(n, do, undo) for n, (do, undo) in zip(names, fns, strict=True))  # type: ignore[return-value]


def _async(fn: Any) -> Any:
    if fn.__code__.co_argcount == 1:

        async def one(a: Any) -> Any:
            return fn(a)

        return one

    async def two(a: Any, b: Any) -> Any:
        return fn(a, b)

    return two


INPUTS = ({"itemId": "882"}, {"chargeId": "ch_123"}, {"orderId": "o-1"})


def run_storebot(saga: Saga, tools: tuple[Tool, Tool, Tool]) -> SagaRollbackError:
    saga.execute(tools[0], INPUTS[0])
    saga.execute(tools[1], INPUTS[1])
    with pytest.raises(SagaRollbackError) as info:
        saga.execute(tools[2], INPUTS[2])
    return info.value


def ids_of(saga_id: str, count: int = STOREBOT_EVENTS) -> list[str]:
    return [f"{saga_id}:{n}" for n in range(1, count + 1)]


class Tee(MemoryStore):
    """A MemoryStore that also keeps the changes it was given, to render them as events."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: list[SagaChange] = []

    def apply(self, change: SagaChange) -> None:
        self.changes.append(change)
        super().apply(change)


def bulk_change(seq: int, saga_id: str = "bulk-1", owner: str = "me") -> SagaChange:
    """A saga-level transition, for tests that need many events without running tools."""
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seq)
    record = SagaRecord(saga_id, "bulk", SagaStatus.IN_PROGRESS, at, at, seq=seq, lease_owner=owner)
    from_state = None if seq == 1 else "IN_PROGRESS"
    event = SagaEvent(saga_id, "bulk", seq, EventKind.SAGA, "IN_PROGRESS", from_state, at)
    return SagaChange(record, None, event)


# ---------------------------------------------------------------- the mirror is exact


def test_storebot_reaches_sagaboard_as_exactly_the_events_of_the_engine(
    fake: Any, make_store: Any
) -> None:
    tee = Tee()
    local = Saga("storebot-return", store=tee, clock=FakeClock(), saga_id="s-1", owner="o")
    run_storebot(local, storebot([]))

    store = make_store()
    assert isinstance(store, SagaStore)
    calls: list[str] = []
    remote = Saga("storebot-return", store=store, clock=FakeClock(), saga_id="s-1", owner="o")
    err = run_storebot(remote, storebot(calls))
    assert store.flush(5)

    expected = [json.loads(json.dumps(change_to_event(c))) for c in tee.changes]
    assert fake.applied == expected
    assert [e["event"]["seq"] for e in fake.applied] == list(range(1, STOREBOT_EVENTS + 1))
    assert [(e.seq, e.to_state) for e in tee.events("s-1")] == [
        (e["event"]["seq"], e["event"]["to_state"]) for e in fake.applied
    ]
    assert remote.status is SagaStatus.ROLLED_BACK and err.rolled_back == ("step-2", "step-1")
    assert calls[-2:] == ["undo:refund_payment:re_1", "undo:return_item:882"]
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in fake.requests)
    assert store.stats()["sent"] == STOREBOT_EVENTS and store.stats()["queued"] == 0


def test_the_saga_never_waits_for_a_sagaboard_that_is_down(fake: Any, make_store: Any) -> None:
    fake.mode = "down"
    store = make_store()
    saga = Saga("storebot-return", store=store)
    started = time.monotonic()
    run_storebot(saga, storebot([]))
    assert time.monotonic() - started < 0.5
    assert saga.status is SagaStatus.ROLLED_BACK
    assert fake.applied == [] and store.stats()["queued"] == STOREBOT_EVENTS
    assert not store.flush(0.05)

    fake.mode = "up"
    assert store.flush(5)
    assert fake.applied_ids() == ids_of(saga.id)
    assert fake.duplicates == 0
    assert store.stats()["retried"] >= 1


def test_a_slow_sagaboard_does_not_slow_the_agent(fake: Any, make_store: Any) -> None:
    fake.mode, fake.delay = "slow", 0.3
    store = make_store()
    saga = Saga("storebot-return", store=store)
    started = time.monotonic()
    run_storebot(saga, storebot([]))
    assert time.monotonic() - started < 0.2
    assert store.flush(5)
    assert fake.applied_ids() == ids_of(saga.id)


# ---------------------------------------------------------------- batching and retries


def test_events_go_in_batches_of_batch_size(fake: Any, make_store: Any) -> None:
    fake.mode = "down"
    store = make_store(batch_size=50)
    noop = define_tool("noop", lambda x: x, lambda out, x: None)
    saga = Saga("bulk", store=store)
    for i in range(249):
        saga.execute(noop, i)
    saga.complete()  # 1 + 2 * 249 + 1 = 500 events
    fake.mode = "up"
    assert store.flush(5)

    accepted = fake.event_posts(status=200)
    assert [len(r.body["events"]) for r in accepted] == [50] * 10
    assert fake.applied_ids() == ids_of(saga.id, 500)


def test_while_up_no_request_carries_more_than_batch_size(fake: Any, make_store: Any) -> None:
    store = make_store(batch_size=7)
    for seq in range(1, 101):
        store.apply(bulk_change(seq))
    assert store.flush(5)
    sizes = [len(r.body["events"]) for r in fake.event_posts()]
    assert max(sizes) <= 7 and sum(sizes) == 100
    assert fake.applied_ids() == ids_of("bulk-1", 100)


def test_a_500_is_retried_with_backoff_and_nothing_is_lost_or_repeated(
    fake: Any, make_store: Any
) -> None:
    fake.fail_next("500", 2)
    store = make_store()
    saga = Saga("storebot-return", store=store)
    run_storebot(saga, storebot([]))
    assert store.flush(5)

    assert [r.status for r in fake.event_posts()][:3] == [500, 500, 200]
    assert store.stats()["retried"] >= 2
    assert fake.applied_ids() == ids_of(saga.id) and fake.duplicates == 0


def test_a_429_waits_for_retry_after(fake: Any, make_store: Any) -> None:
    fake.retry_after = "0.3"
    fake.fail_next("429")
    store = make_store(max_backoff=0.001)
    for seq in range(1, 4):
        store.apply(bulk_change(seq))
    assert store.flush(5)

    posts = fake.event_posts()
    assert posts[0].status == 429 and posts[1].status == 200
    assert posts[1].at - posts[0].at >= 0.29
    assert fake.applied_ids() == ids_of("bulk-1", 3)


def test_a_lost_answer_is_resent_and_answered_as_duplicate(fake: Any, make_store: Any) -> None:
    store = make_store()
    store.apply(bulk_change(1))
    assert store.flush(5)
    # the server applied it but the agent never heard: the same events come again
    other = make_store()
    other.apply(bulk_change(1))
    other.apply(bulk_change(2))
    assert other.flush(5)
    assert fake.applied_ids() == ids_of("bulk-1", 2) and fake.duplicates == 1


# ---------------------------------------------------------------- bad events


@pytest.mark.parametrize("with_index", [True, False], ids=["index", "no-index"])
def test_a_refused_event_is_dropped_with_its_sagas_later_events_and_other_sagas_arrive(
    fake: Any, make_store: Any, caplog: pytest.LogCaptureFixture, with_index: bool
) -> None:
    refused: list[tuple[str, int, str]] = []
    store = make_store(
        on_error=lambda event, err: refused.append((event["event_id"], err.status, err.code))
    )
    fake.mode = "down"  # so both sagas go as one batch
    saga = Saga("storebot-return", store=store)
    run_storebot(saga, storebot([]))
    other = Saga("storebot-return", store=store)
    run_storebot(other, storebot([]))
    bad = f"{saga.id}:5"
    fake.reject, fake.reject_with_index = {bad}, with_index
    fake.mode = "up"
    with caplog.at_level(logging.ERROR, logger="undo_core.remote"):
        assert store.flush(5)  # settled: delivered, or refused and reported

    # What sagaboard has of the refused saga is a true prefix of its history.
    assert fake.applied_ids() == ids_of(saga.id)[:4] + ids_of(other.id)
    assert refused == [(bad, 409, "illegal_transition")]
    stats = store.stats()
    assert stats["dropped_bad"] == 1 and stats["dropped_after_refusal"] == STOREBOT_EVENTS - 5
    assert stats["queued"] == 0 and stats["sent"] == 4 + STOREBOT_EVENTS
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and bad in errors[0] and "illegal_transition" in errors[0]


def test_a_bad_token_is_not_a_bad_event_so_nothing_is_dropped(
    fake: Any, make_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = SagaboardStore(URL, "wrong", transport=fake.transport(), max_backoff=0.02)
    try:
        with caplog.at_level(logging.ERROR, logger="undo_core.remote"):
            store.apply(bulk_change(1))
            assert not store.flush(0.3)
        assert store.stats()["dropped_bad"] == 0 and store.stats()["queued"] == 1
        assert "check the URL and token" in caplog.text
    finally:
        store.close(timeout=0)


# ---------------------------------------------------------------- the bounded queue


def test_a_full_queue_blocks_for_a_bounded_time_then_refuses_the_write(
    fake: Any, make_store: Any
) -> None:
    fake.mode = "down"
    store = make_store(max_queue=5, block_timeout=0.2)
    for seq in range(1, 6):
        store.apply(bulk_change(seq))
    started = time.monotonic()
    with pytest.raises(StoreError, match="sagaboard queue full"):
        store.apply(bulk_change(6))
    assert 0.15 <= time.monotonic() - started < 2.0

    fake.mode = "up"
    assert store.flush(5)
    store.apply(bulk_change(6))
    store.apply(bulk_change(7))
    assert store.flush(5)
    assert fake.applied_ids() == ids_of("bulk-1", 7)


def test_a_full_queue_makes_the_step_fail_before_its_tool_runs(fake: Any, make_store: Any) -> None:
    fake.mode = "down"
    store = make_store(max_queue=1, block_timeout=0.05)
    calls: list[str] = []
    tool = define_tool("charge", lambda x: calls.append("charge"))
    saga = Saga("full", store=store)
    with pytest.raises(StoreError, match="queue full"):
        saga.execute(tool, 1)  # the saga start fills the queue: PENDING cannot be written
    assert calls == []


def test_with_a_spool_the_queue_is_bounded_by_disk_not_memory(
    fake: Any, make_store: Any, tmp_path: Path
) -> None:
    fake.mode = "down"
    store = make_store(max_queue=5, block_timeout=0.05, spool=tmp_path / "spool.db")
    for seq in range(1, 51):
        store.apply(bulk_change(seq))
    assert store.stats()["queued"] == 50 and store.stats()["spooled"] == 50
    fake.mode = "up"
    assert store.flush(5)
    assert fake.applied_ids() == ids_of("bulk-1", 50)


# ---------------------------------------------------------------- the spool


def spool_rows(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT COUNT(*) FROM sagaboard_spool").fetchone()[0])
    finally:
        db.close()


def test_a_spool_in_a_folder_that_does_not_exist_yet_gets_its_folder(
    fake: Any, make_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The quickstart's (docs/agents.md) spool="var/sagaboard.spool", pasted into a fresh folder.
    monkeypatch.chdir(tmp_path)
    store = make_store(spool="var/sagaboard.spool")
    store.apply(bulk_change(1))
    assert store.flush(5)
    store.close()
    assert (tmp_path / "var" / "sagaboard.spool").is_file()
    assert fake.applied_ids() == ids_of("bulk-1", 1)


def test_a_spool_path_that_cannot_be_a_file_is_refused_naming_it_and_what_to_do(
    make_store: Any, tmp_path: Path
) -> None:
    with pytest.raises(StoreError, match="is a folder: give a file path inside it"):
        make_store(spool=tmp_path)
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file where the folder should be")
    with pytest.raises(StoreError) as refused:
        make_store(spool=blocker / "spool.db")
    message = str(refused.value)
    assert repr(str(blocker)) in message and repr(str(blocker / "spool.db")) in message
    assert "create it, or pass another path (spool=)" in message


def test_events_left_in_the_spool_are_sent_first_by_the_next_store(
    fake: Any, make_store: Any, tmp_path: Path
) -> None:
    spool = tmp_path / "spool.db"
    fake.mode = "down"
    first = make_store(spool=spool)
    old = Saga("storebot-return", store=first)
    run_storebot(old, storebot([]))
    assert first.close(timeout=0.1) is False
    assert spool_rows(spool) == STOREBOT_EVENTS

    fake.mode = "up"
    second = make_store(spool=spool)
    new = Saga("next", store=second)
    new.execute(define_tool("noop", lambda x: x), 1)
    new.complete()
    assert second.flush(5)
    assert fake.applied_ids() == ids_of(old.id) + ids_of(new.id, 4)
    assert spool_rows(spool) == 0


@pytest.mark.slow
def test_a_killed_process_leaves_its_events_in_the_spool(
    fake: Any, make_store: Any, tmp_path: Path
) -> None:
    spool, marker = tmp_path / "spool.db", tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = Path(__file__).with_name("spool_worker.py")
    proc = subprocess.Popen(
        [sys.executable, str(worker), str(spool), str(marker)], cwd=ROOT, env=env
    )
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert proc.poll() is None, "the worker exited before its saga ended"
            assert time.monotonic() < deadline, "the worker never signalled"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    saga_id = marker.read_text()
    assert spool_rows(spool) == STOREBOT_EVENTS

    store = make_store(spool=spool)
    assert store.flush(5)
    assert fake.applied_ids() == ids_of(saga_id)
    snapshot = store.load(saga_id)
    assert snapshot is not None and snapshot.status is SagaStatus.ROLLED_BACK
    assert [s.state for s in snapshot.steps] == [
        StepState.ROLLED_BACK,
        StepState.ROLLED_BACK,
        StepState.FAILED,
    ]


# ---------------------------------------------------------------- reads and leases


def test_load_returns_what_sagaboard_rebuilt_from_the_events(make_store: Any) -> None:
    store = make_store()
    saga = Saga("storebot-return", store=store)
    run_storebot(saga, storebot([]))
    assert store.load(saga.id) == saga.snapshot()
    assert store.load("no-such-saga") is None


def test_load_of_a_running_saga_carries_the_local_lease(make_store: Any) -> None:
    store = make_store()
    saga = Saga("running", store=store)
    saga.execute(define_tool("noop", lambda x: {"x": x}, lambda out, x: None), 1)
    loaded = store.load(saga.id)
    assert loaded == saga.snapshot()
    assert loaded is not None and loaded.record.lease_owner is not None


def test_list_unfinished_follows_cursors_oldest_first(fake: Any, make_store: Any) -> None:
    fake.page_size = 1
    store = make_store()
    noop = define_tool("noop", lambda x: x, lambda out, x: None)
    first = Saga("first", store=store)
    first.execute(noop, 1)
    done = Saga("done", store=store)
    run_storebot(done, storebot([]))
    last = Saga("last", store=store)
    last.execute(noop, 2)
    assert store.list_unfinished() == [first.id, last.id]
    listing = [r for r in fake.requests if r.path == "/api/v1/sagas"]
    assert len(listing) == 2
    assert [v for k, v in listing[0].query if k == "status"] == ["IN_PROGRESS", "COMPENSATING"]


def test_leases_are_compare_and_set_in_this_process(make_store: Any) -> None:
    store = make_store()
    later = datetime.now(UTC) + timedelta(hours=1)
    assert store.acquire_lease("s", "a", later, expected_owner=None)
    assert store.acquire_lease("s", "a", later, expected_owner=None)  # already mine
    assert not store.acquire_lease("s", "b", later, expected_owner=None)
    assert store.acquire_lease("s", "b", later, expected_owner="a")
    store.release_lease("s", "a")  # not a's any more: nothing happens
    assert not store.acquire_lease("s", "c", later, expected_owner=None)
    store.release_lease("s", "b")
    assert store.acquire_lease("s", "c", later, expected_owner=None)


def test_a_writer_that_lost_the_lease_is_fenced(make_store: Any) -> None:
    store = make_store()
    store.apply(bulk_change(1, owner="a"))
    later = datetime.now(UTC) + timedelta(hours=1)
    assert store.acquire_lease("bulk-1", "b", later, expected_owner="a")
    with pytest.raises(LeaseError):
        store.apply(bulk_change(2, owner="a"))
    store.apply(bulk_change(2, owner="b"))
    with pytest.raises(LeaseError):
        store.apply(bulk_change(2, owner="b"))  # a stale seq


# ---------------------------------------------------------------- values that are not JSON


def test_a_non_json_input_fails_its_step_before_the_tool_runs(fake: Any, make_store: Any) -> None:
    store = make_store()
    calls: list[str] = []
    first = define_tool(
        "return_item", lambda x: calls.append("do") or "ok", lambda out, x: calls.append("undo")
    )
    email = define_tool("send_email", lambda x: calls.append("send_email"))
    saga = Saga("odd", store=store)
    saga.execute(first, {"itemId": "882"})
    with pytest.raises(SagaRollbackError) as caught:
        saga.execute(email, {"when": object()})

    cause = caught.value.cause
    assert isinstance(cause, SerializationError) and isinstance(cause, TypeError)
    assert "input of step 'step-2' (send_email) of saga 'odd'" in str(cause)
    assert calls == ["do", "undo"]
    assert store.flush(5)
    assert all((e["step"] or {}).get("id") != "step-2" for e in fake.applied)
    loaded = store.load(saga.id)
    assert loaded is not None and loaded.status is SagaStatus.ROLLED_BACK
    assert [s.state for s in loaded.steps] == [StepState.ROLLED_BACK]


def test_a_non_json_output_still_undoes_that_step_and_the_earlier_ones(
    make_store: Any,
) -> None:
    undone: list[str] = []
    first = define_tool("first", lambda x: "ok", lambda out, x: undone.append("first"))
    odd = define_tool("odd_output", lambda x: object(), lambda out, x: undone.append("odd"))
    store = make_store()
    saga = Saga("odd", store=store)
    saga.execute(first, 1)
    with pytest.raises(SagaRollbackError) as caught:
        saga.execute(odd, 2)
    assert "output of step 'step-2' (odd_output)" in str(caught.value.cause)
    assert undone == ["odd", "first"]
    loaded = store.load(saga.id)
    assert loaded is not None and loaded.status is SagaStatus.ROLLED_BACK


# ---------------------------------------------------------------- lifecycle and async


def test_a_closed_store_refuses_writes(make_store: Any) -> None:
    store = make_store()
    store.apply(bulk_change(1))
    assert store.close(timeout=5) is True
    with pytest.raises(StoreError, match="closed"):
        store.apply(bulk_change(2))
    with pytest.raises(StoreError, match="closed"):
        store.load("bulk-1")


def test_the_with_block_sends_everything_on_exit(fake: Any) -> None:
    with SagaboardStore(URL, TOKEN, transport=fake.transport(), flush_interval=1.0) as store:
        saga = Saga("storebot-return", store=store)
        run_storebot(saga, storebot([]))
    assert fake.applied_ids() == ids_of(saga.id)


async def test_an_async_saga_mirrors_inside_async_with(fake: Any) -> None:
    calls: list[str] = []
    tools = storebot(calls, is_async=True)
    async with SagaboardStore(URL, TOKEN, transport=fake.transport(), max_backoff=0.02) as store:
        saga = AsyncSaga("storebot-return", store=store)
        await saga.execute(tools[0], INPUTS[0])
        await saga.execute(tools[1], INPUTS[1])
        with pytest.raises(SagaRollbackError):
            await saga.execute(tools[2], INPUTS[2])
        assert await store.aflush(5)
        assert fake.applied_ids() == ids_of(saga.id)
    assert calls[-2:] == ["undo:refund_payment:re_1", "undo:return_item:882"]
    assert store.stats()["queued"] == 0


@pytest.mark.slow  # imports in a subprocess
def test_undo_core_does_not_import_the_sdk_nor_the_sdk_django() -> None:
    code = (
        "import sys, undo_core; assert 'undo_core.remote' not in sys.modules; "
        "assert 'httpx' not in sys.modules; import undo_core.remote; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('django', 'celery', 'channels', 'ninja', 'sagaboard')]; assert not bad, bad"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env, timeout=30)

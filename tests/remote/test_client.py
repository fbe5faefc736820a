"""SagaboardClient / AsyncSagaboardClient: paths, bodies, idempotent retries, errors."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from undo_core import Saga, StoreError, define_tool
from undo_core.remote import (
    AsyncSagaboardClient,
    SagaboardAPIError,
    SagaboardClient,
    SagaboardStore,
    SagaboardUnavailable,
)

URL = "https://sagaboard.test"
TOKEN = "sgb_ab12cd34_secret"


@pytest.fixture
def client(fake: Any) -> Any:
    with SagaboardClient(URL, TOKEN, transport=fake.transport()) as c:
        yield c


def last(fake: Any) -> Any:
    return fake.requests[-1]


def is_uuid(value: str) -> bool:
    return str(uuid.UUID(value)) == value


def test_the_manual_flow_hits_the_right_paths_with_the_right_bodies(
    fake: Any, client: SagaboardClient
) -> None:
    options = {"on_compensation_failure": "continue"}
    saga = client.begin("checkout-flow", saga_id="s-1", options=options, actor="bot")
    assert saga["id"] == "s-1"
    begin = last(fake)
    assert (begin.method, begin.path) == ("POST", "/api/v1/sagas")
    assert {k: v for k, v in begin.body.items() if k != "event_id"} == {
        "name": "checkout-flow",
        "id": "s-1",
        "on_compensation_failure": "continue",
        "actor": "bot",
    }

    step = client.add_step("s-1", "create_backup", {"f": 1}, undo="rm -f backup.json")
    add = last(fake)
    assert add.path == "/api/v1/sagas/s-1/steps" and step["id"] == "step-1"
    assert {k: v for k, v in add.body.items() if k != "event_id"} == {
        "tool_name": "create_backup",
        "input": {"f": 1},
        "undo": {"kind": "command", "command": "rm -f backup.json"},
        "requires_approval": False,
        "reversibility": "reversible",
    }

    client.complete_step("s-1", "step-1", {"path": "backup.json"})
    assert last(fake).path == "/api/v1/sagas/s-1/steps/step-1/complete"
    assert last(fake).body["output"] == {"path": "backup.json"}

    client.fail_step("s-1", "step-3", ConnectionError("shipping API down"))
    assert last(fake).path == "/api/v1/sagas/s-1/steps/step-3/fail"
    assert set(last(fake).body) == {"event_id", "error"}
    assert last(fake).body["error"] == "shipping API down"

    assert client.rollback("s-1", reason="shipping API down")["status"] == "COMPENSATING"
    assert last(fake).path == "/api/v1/sagas/s-1/rollback"
    assert last(fake).body["reason"] == "shipping API down"

    assert client.complete("s-2")["status"] == "COMPLETED"
    assert last(fake).path == "/api/v1/sagas/s-2/complete"

    client.add_step("s-1", "noop", None, undo={"kind": "webhook", "url": "https://x/undo"})
    assert last(fake).body["undo"] == {"kind": "webhook", "url": "https://x/undo"}
    client.add_step("s-1", "noop", None)
    assert "undo" not in last(fake).body  # the server's default applies

    writes = [r for r in fake.requests if r.method == "POST"]
    ids = [r.body["event_id"] for r in writes]
    assert all(is_uuid(i) for i in ids) and len(set(ids)) == len(ids)
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in fake.requests)


def test_a_retried_call_reuses_its_event_id(fake: Any, client: SagaboardClient) -> None:
    fake.fail_next("500")
    fake.fail_next("down")
    client.begin("checkout-flow")
    sent = [r.body["event_id"] for r in fake.requests]
    assert len(sent) == 3 and len(set(sent)) == 1
    client.begin("checkout-flow")
    assert fake.requests[-1].body["event_id"] != sent[0]


def test_an_error_answer_becomes_a_sagaboard_api_error(fake: Any, client: SagaboardClient) -> None:
    fake.next_error = (
        409,
        {
            "error": {
                "code": "illegal_transition",
                "message": "step 'step-2' cannot go from ROLLED_BACK to FAILED",
                "field": "events[3].step.state",
                "index": 3,
                "event_id": "s-1:7",
            }
        },
    )
    with pytest.raises(SagaboardAPIError) as caught:
        client.send_events([{"event_id": "s-1:7"}])
    err = caught.value
    assert (err.status, err.code, err.field, err.index, err.event_id) == (
        409,
        "illegal_transition",
        "events[3].step.state",
        3,
        "s-1:7",
    )
    assert "ROLLED_BACK to FAILED" in str(err) and isinstance(err, StoreError)


def test_a_404_and_a_401_are_api_errors(fake: Any, client: SagaboardClient) -> None:
    with pytest.raises(SagaboardAPIError) as caught:
        client.status("nope")
    assert (caught.value.status, caught.value.code) == (404, "not_found")
    stranger = SagaboardClient(URL, "wrong", transport=fake.transport())
    with stranger, pytest.raises(SagaboardAPIError) as caught:
        stranger.get_saga("s-1")
    assert (caught.value.status, caught.value.code) == (401, "unauthorized")


def test_a_body_that_is_not_the_error_shape_still_gives_an_api_error(
    fake: Any, client: SagaboardClient
) -> None:
    fake.fail_next("500", 3)
    with pytest.raises(SagaboardAPIError) as caught:
        client.get_saga("s-1")
    assert (caught.value.status, caught.value.code) == (500, "http_500")


def test_an_unreachable_server_raises_sagaboard_unavailable(fake: Any) -> None:
    fake.mode = "down"
    c = SagaboardClient(URL, TOKEN, transport=fake.transport(), retries=1)
    with c, pytest.raises(SagaboardUnavailable, match="cannot reach sagaboard"):
        c.begin("x")
    assert len(fake.requests) == 2


def test_send_read_and_list_with_cursors(
    fake: Any, client: SagaboardClient, make_store: Any
) -> None:
    store: SagaboardStore = make_store()
    noop = define_tool("noop", lambda x: x, lambda out, x: None)
    sagas = [Saga(f"s{i}", store=store) for i in range(3)]
    for saga in sagas:
        saga.execute(noop, 1)
    sagas[1].complete()
    assert store.flush(5)

    fake.page_size = 1
    listed = [s["id"] for s in client.list_sagas(status=["IN_PROGRESS", "COMPENSATING"], q="s")]
    assert listed == [sagas[2].id, sagas[0].id]  # newest first, across two pages
    query = fake.requests[-1].query
    assert ("status", "IN_PROGRESS") in query and ("status", "COMPENSATING") in query
    assert ("q", "s") in query and ("cursor", "1") in query

    steps = client.list_steps(sagas[0].id)
    assert [s["tool_name"] for s in steps] == ["noop"]
    assert client.status(sagas[1].id)["status"] == "COMPLETED"

    log = list(client.list_events(sagas[0].id, limit=1))
    assert [(e["seq"], e["to_state"]) for e in log] == [
        (1, "IN_PROGRESS"),
        (2, "PENDING"),
        (3, "COMPLETED"),
    ]
    assert [dict(r.query).get("after") for r in fake.requests[-4:]] == [None, "1", "2", "3"]

    results = client.send_events(fake.applied[:2])
    assert [r["status"] for r in results] == ["duplicate", "duplicate"]


async def test_the_async_client_does_the_same(fake: Any) -> None:
    async with AsyncSagaboardClient(URL, TOKEN, transport=fake.transport()) as c:
        fake.fail_next("429")
        fake.retry_after = "0"
        saga = await c.begin("checkout-flow", saga_id="a-1")
        posts = [r.body["event_id"] for r in fake.requests]
        assert saga["id"] == "a-1" and len(posts) == 2 and len(set(posts)) == 1
        await c.add_step("a-1", "create_backup", {}, undo="rm x", requires_approval=True)
        assert last(fake).body["requires_approval"] is True
        await c.complete_step("a-1", "step-1")
        await c.fail_step("a-1", "step-1", "boom")
        assert last(fake).body["error"] == "boom"
        await c.rollback("a-1")
        await c.complete("a-1")
        assert [r.path for r in fake.requests[-4:]] == [
            "/api/v1/sagas/a-1/steps/step-1/complete",
            "/api/v1/sagas/a-1/steps/step-1/fail",
            "/api/v1/sagas/a-1/rollback",
            "/api/v1/sagas/a-1/complete",
        ]
        assert [e async for e in c.list_events("a-1")] == []
        with pytest.raises(SagaboardAPIError) as caught:
            await c.get_saga("a-1")
        assert caught.value.status == 404
        assert [s async for s in c.list_sagas()] == []
        fake.mode = "down"
        once = AsyncSagaboardClient(URL, TOKEN, transport=fake.transport(), retries=0)
        async with once:
            with pytest.raises(SagaboardUnavailable):
                await once.status("x")


def test_an_id_is_quoted_in_the_path(fake: Any, client: SagaboardClient) -> None:
    with pytest.raises(SagaboardAPIError):
        client.get_saga("a/b c")
    assert fake.requests[-1].raw_path == "/api/v1/sagas/a%2Fb%20c"

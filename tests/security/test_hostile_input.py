"""What the API fuzzer found, pinned: each of these was a 5xx, an HTML answer or a schema
break before, and must stay a JSON 4xx that changes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_runs import storebot_events
from django.db import connection
from django.test import Client
from fuzz_data import DatabaseState, table_digests

from sagaboard import selectors
from sagaboard.body_limit import BodyLimit
from sagaboard.models import Project
from sagaboard.tokens import token_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client: Client) -> Any:
    project = Project.objects.create(slug="shop", name="Shop")
    token = token_create(project=project, label="agent").secret
    headers = {"Authorization": f"Bearer {token}"}

    class Api:
        def post(self, path: str, body: Any) -> Any:
            data = json.dumps(body)
            return client.post(f"/api/v1{path}", data, "application/json", headers=headers)

        def get(self, path: str, **params: Any) -> Any:
            return client.get(f"/api/v1{path}", params, headers=headers)

        def call(self, method: str, path: str) -> Any:
            return client.generic(method, f"/api/v1{path}", headers=headers)

    return Api()


def digests() -> dict[str, str]:
    with connection.cursor() as cursor:
        return table_digests(cursor)


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json"), response.content
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]  # type: ignore[no-any-return]


def test_an_event_id_replayed_on_another_saga_is_a_conflict_not_a_replay(api: Any) -> None:
    # It was answered as a replay of the first saga's rollback, then failed to render: a 500.
    first = api.post("/sagas", {"event_id": "b1", "name": "one"}).json()["id"]
    second = api.post("/sagas", {"event_id": "b2", "name": "two"}).json()["id"]
    assert api.post(f"/sagas/{first}/rollback", {"event_id": "r1"}).status_code == 202
    before = digests()
    error = error_of(api.post(f"/sagas/{second}/rollback", {"event_id": "r1"}), 409)
    assert error["code"] == "conflict" and error["field"] == "event_id"
    assert DatabaseState.changed(before, digests()) == []
    assert api.get(f"/sagas/{second}").json()["status"] == "IN_PROGRESS"
    # The same call again on the same saga is still a replay.
    assert api.post(f"/sagas/{first}/rollback", {"event_id": "r1"}).status_code == 202


def test_nul_in_ids_and_filters_finds_what_was_stored_and_never_fails(api: Any) -> None:
    # PostgreSQL text cannot hold NUL: a NUL in a path or a filter reached the query and
    # failed there. It reads as U+FFFD, as the same characters in a body were stored.
    saga = api.post("/sagas", {"event_id": "b", "name": "n", "id": "a\x00b"}).json()["id"]
    assert saga == "a\ufffdb"
    assert api.get("/sagas/a%00b").json()["id"] == saga
    assert api.get("/sagas/a%00b/events").status_code == 200
    assert error_of(api.get("/sagas/x%00/steps/s%00/decision"), 404)["code"] == "not_found"
    listed = api.get("/sagas", q="a\x00", tool="\x00", cursor="")
    assert listed.status_code in (200, 422), listed.content
    assert api.get("/sagas", q="a\x00").json()["items"][0]["id"] == saga


@pytest.mark.parametrize(
    "value", ["8", "0.5", "2026-01-31", "2026-01-31T12:00:00", "2026-01-31 12:00:00Z"]
)
def test_times_must_be_rfc_3339_with_an_offset(api: Any, value: str) -> None:
    # pydantic took 8 for 1970-01-01T00:00:08Z and a time without offset as naive.
    error = error_of(api.get("/sagas", updated_before=value), 422)
    assert error["field"] == "updated_before" and "RFC 3339" in error["message"]
    event = storebot_events()[0]
    event["event"]["at"] = value
    error = error_of(api.post("/events", {"events": [event]}), 422)
    assert error["field"] == "events[0].event.at" and error["index"] == 0
    assert api.get("/sagas", updated_before="2026-01-31T12:00:00.5+01:00").status_code == 200


def test_query_bounds_are_in_the_schema_and_enforced(api: Any) -> None:
    api.post("/events", {"events": storebot_events()})
    for params, field in [
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"status": "NOT_A_STATUS"}, "status.0"),
    ]:
        assert error_of(api.get("/sagas", **params), 422)["field"] == field
    for params, field in [({"after": -1}, "after"), ({"after": 2**63}, "after")]:
        assert error_of(api.get("/sagas/storebot-1/events", **params), 422)["field"] == field
    schema = api.get("/openapi.json").json()
    limit = next(
        p for p in schema["paths"]["/api/v1/sagas"]["get"]["parameters"] if p["name"] == "limit"
    )
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 500)


def test_a_blank_name_in_a_mirrored_event_is_refused(api: Any) -> None:
    event = storebot_events()[0]
    event["saga"]["name"] = " \t"
    error = error_of(api.post("/events", {"events": [event]}), 422)
    assert error["field"] == "events[0].saga.name" and "blank" in error["message"]


def test_unknown_paths_and_methods_answer_json(api: Any) -> None:
    error = error_of(api.get("/no/such/path"), 404)
    assert error["code"] == "not_found"
    response = api.call("DELETE", "/sagas")
    assert error_of(response, 405)["code"] == "method_not_allowed"
    assert set(response["Allow"].replace(" ", "").split(",")) == {"GET", "POST"}


def test_an_unexpected_failure_is_a_json_500_and_says_nothing_was_applied(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(**kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(selectors, "saga_list", broken)
    error = error_of(api.get("/sagas"), 500)
    assert error == {
        "code": "internal_error",
        "message": "the server failed; nothing was applied",
    }


# ---------------------------------------------------------------- the body limit, under ASGI


class _App:
    """The ASGI app behind the limit: records the body it was handed."""

    def __init__(self) -> None:
        self.body: bytes | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.body = message["body"]
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def _run(app: Any, path: str, chunks: list[bytes], length: int | None) -> list[Any]:
    headers = [] if length is None else [(b"content-length", str(length).encode())]
    scope = {"type": "http", "path": path, "method": "POST", "headers": headers}
    incoming = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    read: list[bytes] = []
    sent: list[Any] = []

    async def receive() -> Any:
        message = incoming.pop(0)
        read.append(message["body"])
        return message

    async def send(message: Any) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return [sent, read]


async def test_a_declared_oversized_body_is_refused_before_any_of_it_is_read(
    settings: Any,
) -> None:
    settings.SAGABOARD_API_MAX_BODY = 10
    inner = _App()
    sent, read = await _run(BodyLimit(inner), "/api/v1/events", [b"x" * 11], 11)
    assert sent[0]["status"] == 413 and read == [] and inner.body is None
    headers = dict(sent[0]["headers"])
    assert headers[b"content-type"].startswith(b"application/json")
    error = json.loads(sent[1]["body"])["error"]
    assert error["code"] == "payload_too_large" and "SAGABOARD_API_MAX_BODY" in error["message"]


async def test_a_chunked_body_is_cut_off_as_soon_as_it_passes_the_limit(settings: Any) -> None:
    settings.SAGABOARD_API_MAX_BODY = 10
    inner = _App()
    sent, read = await _run(BodyLimit(inner), "/api/v1/events", [b"12345", b"678901", b"z"], None)
    assert sent[0]["status"] == 413 and inner.body is None
    assert read == [b"12345", b"678901"]  # the last chunk was never read


async def test_a_body_at_the_limit_reaches_the_app_whole(settings: Any) -> None:
    settings.SAGABOARD_API_MAX_BODY = 10
    inner = _App()
    sent, _ = await _run(BodyLimit(inner), "/api/v1/events", [b"12345", b"67890"], None)
    assert sent[0]["status"] == 204 and inner.body == b"1234567890"
    page = _App()  # pages are not the API's: Django's own limit applies to them
    sent, _ = await _run(BodyLimit(page), "/login/", [b"x" * 50], 50)
    assert sent[0]["status"] == 204 and page.body == b"x" * 50

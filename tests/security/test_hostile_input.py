"""What the API fuzzer found, pinned: each of these was a 5xx, an HTML answer or a schema
break before, and must stay a JSON 4xx that changes nothing."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from sagaboard.access.reads import visible
from sagaboard.access.services.tokens import token_create
from sagaboard.infra.http.body_limit import BodyLimit
from sagaboard.models import Project
from tests.support.agent_runs import storebot_events
from tests.support.fuzz_data import DatabaseState, table_digests

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client: Client) -> Any:
    project = Project.objects.create(slug="shop", name="Shop")
    token = token_create(project=project, label="agent").secret
    headers = {"Authorization": f"Bearer {token}"}

    class Api:
        def post(self, path: str, body: Any) -> Any:
            return self.post_text(path, json.dumps(body))

        def post_text(self, path: str, data: str) -> Any:
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


def test_nul_in_an_id_is_refused_not_rewritten(api: Any) -> None:
    # PostgreSQL text cannot hold NUL. It was rewritten to U+FFFD, so "a\x00b" and "a\ufffdb"
    # were one saga; a NUL in a path or a filter failed in the query (a 500). Now nothing
    # stored can hold one, and any NUL is refused naming its field.
    before = digests()
    for body, field in [
        ({"event_id": "b", "name": "n", "id": "a\x00b"}, "id"),
        ({"event_id": "b\x00", "name": "n"}, "event_id"),
        ({"event_id": "b", "name": "n\x00"}, "name"),
    ]:
        error = error_of(api.post("/sagas", body), 422)
        assert error["field"] == field and "U+0000" in error["message"], error
    event = storebot_events()[0]
    event["saga"]["id"] = "storebot\x00"
    error = error_of(api.post("/events", {"events": [event]}), 422)
    assert error["field"] == "events[0].saga.id" and "U+0000" in error["message"]
    assert DatabaseState.changed(before, digests()) == []
    saga = api.post("/sagas", {"event_id": "b", "name": "n", "id": "a\ufffdb"}).json()["id"]
    assert saga == "a\ufffdb"  # U+FFFD itself is an ordinary character
    for response, field in [
        (api.get("/sagas/a%00b"), "saga_id"),
        (api.get("/sagas/a%00b/events"), "saga_id"),
        (api.get("/sagas/x%00/steps/s/decision"), "saga_id"),
        (api.get("/sagas", q="a\x00"), "q"),
        (api.get("/sagas", tool="\x00"), "tool"),
    ]:
        assert error_of(response, 422)["field"] == field, response.content


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
        ({"status": "NOT_A_STATUS"}, "status[0]"),
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

    monkeypatch.setattr(visible, "saga_list", broken)
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


# ---------------------------------------------------------------- hostile values (issue 14)
# Each of these was a 500 (the database or the JSON encoder failed on the value): now a
# 422 naming the field, and nothing stored. The text policy is sagaboard.infra.text_policy.

AT_ATTEMPT = 9  # the StoreBot run's first event whose step carries an undo attempt


def tampered(index: int, path: str, value: Any) -> list[dict[str, Any]]:
    """The StoreBot run up to event ``index``, that event's ``path`` set to ``value``."""
    events = storebot_events()[: index + 1]
    *parents, leaf = path.replace("[0]", ".0").split(".")
    node: Any = events[index]
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[leaf] = value
    return events


def refused_naming(response: Any, field: str, index: int | None = None) -> str:
    error = error_of(response, 422)
    assert error["code"] == "validation_error", error
    assert error["field"] == field, error
    if index is not None:
        assert error["index"] == index, error
    assert field in error["message"], error
    return str(error["message"])


OVERFLOWING_TIMES = [
    "9999-12-31T23:59:59-05:00",
    "9999-12-31t23:30:00.123456-00:31",
    "0001-01-01T00:00:00+05:00",
]
TIME_FIELDS = [
    (0, "event.at"),
    (0, "saga.created_at"),
    (0, "saga.updated_at"),
    (1, "step.created_at"),
    (1, "step.updated_at"),
    (2, "step.completed_at"),
    (AT_ATTEMPT, "step.attempts[0].started_at"),
    (AT_ATTEMPT, "step.attempts[0].finished_at"),
]


@pytest.mark.parametrize("value", OVERFLOWING_TIMES)
@pytest.mark.parametrize(("index", "path"), TIME_FIELDS)
def test_an_event_time_past_the_utc_range_is_refused_naming_it(
    api: Any, index: int, path: str, value: str
) -> None:
    before = digests()
    response = api.post("/events", {"events": tampered(index, path, value)})
    message = refused_naming(response, f"events[{index}].{path}", index)
    assert "out of range" in message and "UTC" in message
    assert DatabaseState.changed(before, digests()) == []
    assert api.get("/sagas").json()["items"] == []


@pytest.mark.parametrize("value", OVERFLOWING_TIMES)
@pytest.mark.parametrize("name", ["updated_after", "updated_before"])
def test_a_list_filter_time_past_the_utc_range_is_refused_naming_it(
    api: Any, name: str, value: str
) -> None:
    api.post("/events", {"events": storebot_events()})
    message = refused_naming(api.get("/sagas", **{name: value}), name)
    assert "out of range" in message
    # The last representable instants still work.
    assert api.get("/sagas", **{name: "9999-12-31T23:59:59Z"}).status_code == 200
    assert api.get("/sagas", **{name: "0001-01-01T00:00:00Z"}).status_code == 200


@pytest.mark.parametrize(
    "forged",
    [
        ["9999-12-31T23:59:59-05:00", 1],  # past UTC's range
        ["2026-01-01T00:00:00+00:00", 2**64],  # past the id column
        ["2026-01-01T00:00:00+00:00", -(2**64)],
        ["2026-01-01T00:00:00+00:00", 1.5e300],
        ["2026-01-01T00:00:00", 1],  # no offset
    ],
)
def test_a_forged_list_cursor_past_the_columns_is_refused_naming_it(
    api: Any, forged: list[Any]
) -> None:
    # The cursor is base64 JSON: a client can forge one; its values reached the query (500).
    api.post("/events", {"events": storebot_events()})
    cursor = base64.urlsafe_b64encode(json.dumps(forged).encode()).decode().rstrip("=")
    message = refused_naming(api.get("/sagas", cursor=cursor), "cursor")
    assert "not one this server issued" in message


@pytest.mark.parametrize(
    ("index", "path", "value", "bound"),
    [
        (0, "saga.seq", 2**63, "9223372036854775807"),
        (0, "event.seq", 2**63, "9223372036854775807"),
        (0, "saga.seq", -(2**63) - 1, "greater than or equal to 1"),
        (0, "saga.next_step_number", 2**31, "2147483647"),
        (0, "saga.next_step_number", 0, "greater than or equal to 1"),
        (1, "step.position", 2**31, "2147483647"),
        (1, "step.position", -1, "greater than or equal to 0"),
        (AT_ATTEMPT, "step.attempts[0].number", 2**63, "2147483647"),
        (AT_ATTEMPT, "step.attempts[0].number", 0, "greater than or equal to 1"),
    ],
)
def test_an_integer_past_its_column_is_refused_naming_it(
    api: Any, index: int, path: str, value: int, bound: str
) -> None:
    before = digests()
    response = api.post("/events", {"events": tampered(index, path, value)})
    field = f"events[{index}].{path}"
    assert bound in refused_naming(response, field, index)
    assert DatabaseState.changed(before, digests()) == []


def test_the_schema_states_every_integer_bound(api: Any) -> None:
    schemas = api.get("/openapi.json").json()["components"]["schemas"]
    for model, field, maximum, minimum in [
        ("SagaIn", "seq", 2**63 - 1, 1),
        ("EventInfoIn", "seq", 2**63 - 1, 1),
        ("SagaIn", "next_step_number", 2**31 - 1, 1),
        ("StepIn", "position", 2**31 - 1, 0),
        ("AttemptIn", "number", 2**31 - 1, 1),
    ]:
        bounds = schemas[model]["properties"][field]
        assert (bounds["minimum"], bounds["maximum"]) == (minimum, maximum), (model, field)


def raw_with(body: dict[str, Any], marker: str, literal: str) -> str:
    """``body`` as JSON with the string ``marker`` swapped for a raw JSON ``literal``
    (``1e999``, ``"\\udc80"``): what no well-behaved encoder would write."""
    return json.dumps(body).replace(f'"{marker}"', literal)


@pytest.fixture
def raw(client: Client, api: Any) -> Any:
    token = token_create(project=Project.objects.get(slug="shop"), label="raw").secret

    def post(path: str, body: dict[str, Any], literal: str) -> Any:
        data = raw_with(body, "@", literal)
        headers = {"Authorization": f"Bearer {token}"}
        return client.post(f"/api/v1{path}", data, "application/json", headers=headers)

    return post


@pytest.mark.parametrize("literal", ["1e999", "-1e999", "1" + "0" * 400 + ".0"])
def test_a_number_past_a_double_in_a_manual_flow_value_is_refused_naming_it(
    api: Any, raw: Any, literal: str
) -> None:
    saga = api.post("/sagas", {"event_id": "b", "name": "n"}).json()["id"]
    step = api.post(f"/sagas/{saga}/steps", {"event_id": "s", "tool_name": "t"}).json()["id"]
    before = digests()
    cases = [
        (f"/sagas/{saga}/steps", {"event_id": "a", "tool_name": "t", "input": "@"}, "input"),
        (f"/sagas/{saga}/steps", {"event_id": "a", "tool_name": "t", "input": {"n": ["@"]}},
         "input.n[0]"),
        (f"/sagas/{saga}/steps/{step}/complete", {"event_id": "c", "output": "@"}, "output"),
        (f"/sagas/{saga}/steps", {"event_id": "a", "tool_name": "t",
                                  "undo": {"kind": "handler", "handler": "h", "args": {"x": "@"}}},
         "undo.args.x"),
    ]  # fmt: skip
    for path, body, field in cases:
        assert "out of range" in refused_naming(raw(path, body, literal), field)
    assert DatabaseState.changed(before, digests()) == []


@pytest.mark.parametrize(
    ("index", "path"),
    [(0, "saga.state"), (0, "saga.options"), (1, "step.input"), (2, "step.output"),
     (1, "step.metadata")],
)  # fmt: skip
def test_a_number_past_a_double_in_an_event_value_is_refused_naming_it(
    api: Any, raw: Any, index: int, path: str
) -> None:
    before = digests()
    events = tampered(index, path, {"big": "@"})
    response = raw("/events", {"events": events}, "-1e999")
    field = f"events[{index}].{path}.big"
    assert "out of range" in refused_naming(response, field, index)
    assert DatabaseState.changed(before, digests()) == []


def test_a_lone_surrogate_in_a_manual_flow_input_is_refused_naming_it(api: Any, raw: Any) -> None:
    # What os.fsdecode gives for a file name that is not UTF-8: it failed the digest (500).
    saga = api.post("/sagas", {"event_id": "b", "name": "n"}).json()["id"]
    before = digests()
    for body, field in [
        ({"event_id": "a", "tool_name": "t", "input": "@"}, "input"),
        ({"event_id": "a", "tool_name": "t", "input": {"path": "@"}}, "input.path"),
        ({"event_id": "a", "tool_name": "t", "input": {"files": ["ok", "@"]}}, "input.files[1]"),
    ]:
        message = refused_naming(raw(f"/sagas/{saga}/steps", body, '"\\udc80"'), field)
        assert "lone surrogate (U+DC80)" in message
    body = '{"event_id": "a", "tool_name": "t", "input": {"\\udc80": 1}}'  # as a key
    response = api.post_text(f"/sagas/{saga}/steps", body)
    assert "key with a lone surrogate" in refused_naming(response, "input")
    assert DatabaseState.changed(before, digests()) == []


SURROGATE_FIELDS = [
    ("/sagas", {"event_id": "b", "name": "@"}, "name"),
    ("/sagas", {"event_id": "b", "name": "n", "id": "@"}, "id"),
    ("/sagas", {"event_id": "@", "name": "n"}, "event_id"),
    ("/sagas", {"event_id": "b", "name": "n", "actor": "@"}, "actor"),
    ("/sagas/{saga}/steps", {"event_id": "s", "tool_name": "@"}, "tool_name"),
    ("/sagas/{saga}/steps/{step}/fail", {"event_id": "f", "error": "@"}, "error"),
    ("/sagas/{saga}/rollback", {"event_id": "r", "reason": "@"}, "reason"),
]


@pytest.mark.parametrize(("path", "body", "field"), SURROGATE_FIELDS)
def test_a_lone_surrogate_in_stored_text_is_refused_naming_it(
    api: Any, raw: Any, path: str, body: dict[str, Any], field: str
) -> None:
    saga = api.post("/sagas", {"event_id": "b0", "name": "n"}).json()["id"]
    step = api.post(f"/sagas/{saga}/steps", {"event_id": "s0", "tool_name": "t"}).json()["id"]
    before = digests()
    response = raw(path.format(saga=saga, step=step), body, '"x\\udc80"')
    assert "lone surrogate" in refused_naming(response, field)
    assert DatabaseState.changed(before, digests()) == []


@pytest.mark.parametrize(
    ("index", "path"),
    [(0, "event_id"), (0, "saga.id"), (0, "saga.name"), (1, "step.id"), (1, "step.tool_name"),
     (1, "step.idempotency_key"), (6, "step.error"), (6, "step.traceback"),
     (AT_ATTEMPT, "step.attempts[0].error"), (1, "step.decision_note"), (0, "event.detail"),
     (0, "event.actor"), (1, "step.input"), (1, "step.metadata")],
)  # fmt: skip
def test_a_lone_surrogate_anywhere_in_an_event_is_refused_naming_it(
    api: Any, raw: Any, index: int, path: str
) -> None:
    before = digests()
    response = raw("/events", {"events": tampered(index, path, "@")}, '"\\udc80"')
    assert "lone surrogate" in refused_naming(response, f"events[{index}].{path}")
    assert DatabaseState.changed(before, digests()) == []


# ---------------------------------------------------------------- what the schema says


def _open_bounds(name: str, node: dict[str, Any], where: str) -> list[str]:
    """Where an input schema leaves a string, an integer or an array unbounded."""
    branches = node.get("anyOf", [node])
    found = []
    for branch in branches:
        kind = branch.get("type")
        if kind == "string" and not {"enum", "const", "format"} & set(branch):
            if "maxLength" not in branch:
                found.append(f"{where}: no maxLength")
        elif kind == "integer" and not {"minimum", "maximum"} <= set(branch):
            found.append(f"{where}: no minimum/maximum")
        elif kind == "array" and "maxItems" not in branch:
            found.append(f"{where}: no maxItems")
    return found


def test_the_schema_bounds_every_input_string_integer_and_list(api: Any, settings: Any) -> None:
    settings.SAGABOARD_MAX_VALUE_SIZE = 4321  # the schema states the current settings
    settings.SAGABOARD_API_MAX_BATCH = 77
    schema = api.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    unbounded = []
    for name, model in components.items():
        if name.endswith("In"):
            for field, node in model.get("properties", {}).items():
                unbounded += _open_bounds(name, node, f"{name}.{field}")
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            for param in op.get("parameters", []):
                if param["name"] != "status":  # a list of enum values
                    where = f"{method} {path} {param['name']}"
                    unbounded += _open_bounds(param["name"], param["schema"], where)
    assert unbounded == []
    error = components["StepIn"]["properties"]["error"]["anyOf"][0]
    assert error["maxLength"] == 4321
    assert components["EventBatchIn"]["properties"]["events"]["maxItems"] == 77


def test_output_schemas_use_enums_for_statuses_states_kinds_and_outcomes(api: Any) -> None:
    components = api.get("/openapi.json").json()["components"]["schemas"]

    def ref(model: str, field: str) -> str:
        node = components[model]["properties"][field]
        return json.dumps(node)

    assert "#/components/schemas/SagaStatus" in ref("SagaSummaryOut", "status")
    assert "#/components/schemas/StepState" in ref("StepOut", "state")
    assert "#/components/schemas/AttemptOutcome" in ref("AttemptOut", "outcome")
    assert "#/components/schemas/EventKind" in ref("EventOut", "kind")
    assert "#/components/schemas/StepState" in ref("DecisionOut", "state")
    assert "#/components/schemas/StepState" in ref("AckOut", "state")
    # undo_core's vocabularies, each one named component (issue 33: one vocabulary).
    assert "#/components/schemas/ApprovalStatus" in ref("ApprovalOut", "status")
    assert "#/components/schemas/StepAction" in ref("DecisionOut", "action")
    assert "#/components/schemas/CarriedOut" in ref("AckOut", "acknowledged")
    assert "#/components/schemas/BatchAction" in ref("BatchJobOut", "action")
    assert components["StepAction"]["enum"] == ["retry", "resolve", "leave"]
    assert components["CarriedOut"]["enum"] == ["retry", "resolve"]
    assert components["UndoKind"]["enum"] == ["none", "client", "handler", "webhook", "command"]
    for model, field in [("SagaSummaryOut", "driver"), ("StepOut", "reversibility"),
                         ("EventResultOut", "status")]:  # fmt: skip
        assert '"enum"' in ref(model, field), (model, field)


def test_every_operation_documents_429_and_a_401_challenge_that_each_401_carries(
    api: Any, client: Client
) -> None:
    schema = api.get("/openapi.json").json()
    operations = 0
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            responses = op["responses"]
            assert "Retry-After" in responses["429"]["headers"], (method, path)
            challenge = responses["401"]["headers"]["WWW-Authenticate"]["schema"]
            assert challenge["enum"] == ['Bearer realm="sagaboard"']
            url = re.sub(r"\{[^}]+\}", "1", path)
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                answer = client.generic(
                    method.upper(), url, "{}", content_type="application/json", headers=headers
                )
                assert answer.status_code == 401, (method, path)
                assert answer["WWW-Authenticate"] == 'Bearer realm="sagaboard"', (method, path)
            operations += 1
    assert operations >= 15

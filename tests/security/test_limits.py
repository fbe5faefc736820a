"""API limits (docs/api.md, "Limits"): just under each passes, just over gets a 4xx naming the
field and the limit, and nothing of the refused request is stored."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.models import Project
from tests.support.agent_runs import storebot_events
from tests.support.batch_cost import cost
from tests.support.fuzz_data import DatabaseState, table_digests
from tests.support.live_server import prepare, temp_database

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]


@pytest.fixture
def call(client: Client) -> Callable[..., Any]:
    project = Project.objects.create(slug="shop", name="Shop")
    token = token_create(project=project, label="agent").secret
    counter = iter(range(10**6))

    def call(path: str, body: Any = None, *, raw: bytes | None = None, get: bool = False) -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        if get:
            return client.get(f"/api/v1{path}", headers=headers)
        if raw is None and isinstance(body, dict) and "events" not in body:
            body.setdefault("event_id", f"ev-{next(counter)}")
        data = raw if raw is not None else json.dumps(body)
        return client.post(f"/api/v1{path}", data, content_type="application/json", headers=headers)

    return call


class Tables:
    """``mark()``, then ``unchanged()`` asserts no row a request could write has changed."""

    def mark(self) -> None:
        self.before = self._digests()

    def unchanged(self) -> None:
        assert DatabaseState.changed(self.before, self._digests()) == []

    @staticmethod
    def _digests() -> dict[str, str]:
        with connection.cursor() as cursor:
            return table_digests(cursor)


@pytest.fixture
def tables() -> Tables:
    return Tables()


def refused(response: Any, status: int, field: str | None, *words: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    error: dict[str, Any] = response.json()["error"]
    assert error.get("field") == field, error
    for word in words:
        assert word in error["message"], error
    return error


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


def begin(call: Callable[..., Any]) -> str:
    response = call("/sagas", {"name": "checkout"})
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


# ---------------------------------------------------------------- nesting depth


def test_inputs_nest_up_to_the_depth_limit_and_no_deeper(
    call: Any, settings: Any, tables: Tables
) -> None:
    settings.SAGABOARD_MAX_JSON_DEPTH = 5
    saga = begin(call)
    ok = call(f"/sagas/{saga}/steps", {"tool_name": "t", "input": nested(5)})
    assert ok.status_code == 201, ok.content
    tables.mark()
    over = call(f"/sagas/{saga}/steps", {"tool_name": "t", "input": nested(6)})
    refused(over, 422, "input", "nested deeper than 5 levels", "SAGABOARD_MAX_JSON_DEPTH")
    over = call(f"/sagas/{saga}/steps/step-1/complete", {"output": [nested(5)]})
    refused(over, 422, "output", "nested deeper than 5 levels")
    over = call(f"/sagas/{saga}/steps", {"tool_name": "t", "undo": {"args": nested(6)}})
    refused(over, 422, "undo.args", "nested deeper")
    tables.unchanged()


def test_mirrored_values_are_held_to_the_depth_limit_naming_the_event(
    call: Any, settings: Any, tables: Tables
) -> None:
    settings.SAGABOARD_MAX_JSON_DEPTH = 5
    events = storebot_events()
    for event in events[1:]:  # a step's input is the same in every event (it never changes)
        if event["step"] and event["step"]["id"] == "step-1":
            event["step"]["input"] = nested(5)
    events[2]["step"]["metadata"] = {"trace": nested(4)}
    assert call("/events", {"events": events[:3]}).status_code == 200
    tables.mark()
    events[3]["step"]["metadata"] = {"trace": nested(5)}
    error = refused(call("/events", {"events": events[3:]}), 422, "events[0].step.metadata")
    assert error["index"] == 0 and "nested deeper than 5 levels" in error["message"]
    tables.unchanged()


def test_a_body_nested_past_what_the_parser_takes_is_a_400_not_a_crash(
    call: Any, tables: Tables
) -> None:
    tables.mark()
    deep = b'{"events": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    refused(call("/events", raw=deep), 400, None, "nests deeper than", "SAGABOARD_MAX_JSON_DEPTH")
    tables.unchanged()


def test_nan_and_infinity_are_not_json_and_are_refused_before_anything_is_stored(
    call: Any, tables: Tables
) -> None:
    # They used to be stored halfway: the write failed (allow_nan=False) with an HTML 500.
    saga = begin(call)
    tables.mark()
    for constant in (b"NaN", b"Infinity", b"-Infinity"):
        body = b'{"event_id": "x", "tool_name": "t", "input": {"a": ' + constant + b"}}"
        refused(call(f"/sagas/{saga}/steps", raw=body), 400, None, "is not a JSON value")
    tables.unchanged()


# ---------------------------------------------------------------- stored sizes


def test_values_and_texts_are_stored_up_to_the_size_limit(
    call: Any, settings: Any, tables: Tables
) -> None:
    settings.SAGABOARD_MAX_VALUE_SIZE = 100
    saga = begin(call)
    just = {"k": "x" * 92}  # {"k":"…"} is 100 characters as compact JSON
    assert call(f"/sagas/{saga}/steps", {"tool_name": "t", "input": just}).status_code == 201
    assert call(f"/sagas/{saga}/steps", {"tool_name": "t", "input": "y" * 100}).status_code == 201
    tables.mark()
    over = call(f"/sagas/{saga}/steps", {"tool_name": "t", "input": {"k": "x" * 93}})
    refused(over, 422, "input", "larger than 100 characters", "SAGABOARD_MAX_VALUE_SIZE")
    over = call(f"/sagas/{saga}/steps/step-1/complete", {"output": ["z" * 101]})
    refused(over, 422, "output", "larger than 100 characters")
    over = call(f"/sagas/{saga}/steps", {"tool_name": "t", "input": "y" * 101})
    refused(over, 422, "input", "larger than 100 characters")
    tables.unchanged()


def test_mirrored_errors_and_tracebacks_are_held_to_the_size_limit(
    call: Any, settings: Any, tables: Tables
) -> None:
    settings.SAGABOARD_MAX_VALUE_SIZE = 100
    events = storebot_events()
    failed = next(i for i, e in enumerate(events) if (e["step"] or {}).get("state") == "FAILED")
    assert call("/events", {"events": events[:failed]}).status_code == 200
    tables.mark()
    events[failed]["step"]["traceback"] = "t" * 101
    error = refused(call("/events", {"events": events[failed:]}), 422, "events[0].step.traceback")
    assert "larger than 100 characters" in error["message"]
    events[failed]["step"]["traceback"] = None
    events[failed]["step"]["error"] = "e" * 101
    refused(call("/events", {"events": events[failed:]}), 422, "events[0].step.error")
    tables.unchanged()
    events[failed]["step"]["error"] = "e" * 100
    assert call("/events", {"events": events[failed:]}).status_code == 200


# ---------------------------------------------------------------- steps per saga


def test_a_saga_driven_by_hand_takes_steps_up_to_the_limit(
    call: Any, settings: Any, tables: Tables
) -> None:
    settings.SAGABOARD_MAX_STEPS = 2
    saga = begin(call)
    for _ in range(2):
        assert call(f"/sagas/{saga}/steps", {"tool_name": "t"}).status_code == 201
    tables.mark()
    error = refused(call(f"/sagas/{saga}/steps", {"tool_name": "t"}), 422, "saga_id")
    assert error["code"] == "limit_exceeded" and "at most 2 steps" in error["message"]
    tables.unchanged()


def test_a_mirrored_saga_takes_steps_up_to_the_limit_within_and_across_batches(
    call: Any, settings: Any, tables: Tables
) -> None:
    settings.SAGABOARD_MAX_STEPS = 2  # StoreBot has three steps
    events = storebot_events()
    third = next(i for i, e in enumerate(events) if (e["step"] or {}).get("id") == "step-3")
    tables.mark()
    error = refused(call("/events", {"events": events}), 422, "step.id", "SAGABOARD_MAX_STEPS")
    assert error["code"] == "limit_exceeded" and error["index"] == third
    tables.unchanged()
    assert call("/events", {"events": events[:third]}).status_code == 200  # two steps: fine
    tables.mark()
    error = refused(call("/events", {"events": events[third:]}), 422, "step.id")
    assert error["index"] == 0
    tables.unchanged()
    settings.SAGABOARD_MAX_STEPS = 3
    assert call("/events", {"events": events[third:]}).status_code == 200


# ---------------------------------------------------------------- batch, names, body


def test_a_batch_takes_events_up_to_the_limit(call: Any, settings: Any, tables: Tables) -> None:
    events = storebot_events()
    settings.SAGABOARD_API_MAX_BATCH = len(events) - 1
    tables.mark()
    refused(call("/events", {"events": events}), 422, "events", f"at most {len(events) - 1}")
    tables.unchanged()
    settings.SAGABOARD_API_MAX_BATCH = len(events)
    assert call("/events", {"events": events}).status_code == 200


def tiny_items(count: int) -> bytes:
    return b'{"events":[' + b",".join([b"{}"] * count) + b"]}"


def test_a_batch_of_many_tiny_items_is_refused_for_its_count_before_any_item_is_read(
    call: Any, tables: Tables
) -> None:
    # 349,000 empty objects (1 MB, under the body limit) were each validated first: 11 s and
    # 1.6 GB of a web process, to answer "events[0].event_id: Field required".
    body = tiny_items(349_000)
    assert len(body) < 1024 * 1024
    tables.mark()
    error = refused(call("/events", raw=body), 422, "events", "at most 1000 events per batch")
    assert "349000" in error["message"] and "index" not in error
    tables.unchanged()


def test_one_event_over_the_limit_is_refused_for_the_count_not_for_an_event(
    call: Any, tables: Tables
) -> None:
    tables.mark()
    refused(call("/events", raw=tiny_items(1001)), 422, "events", "at most 1000", "1001")
    # At the limit the count passes and the events themselves are read.
    refused(call("/events", raw=tiny_items(1000)), 422, "events[0].event_id")
    tables.unchanged()


@pytest.mark.slow  # a web process of its own per request, on a database of its own
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures on Linux")
def test_a_batch_refused_for_its_count_costs_a_web_process_less_than_an_accepted_one(
    tmp_path: Path,
) -> None:
    kind = "postgres" if connection.vendor == "postgresql" else "sqlite"
    with temp_database(kind, tmp_path) as url:
        token = prepare(url)
        accepted, *refusals = (cost(url, token, body) for body in ("accepted", "empty", "over"))
    assert accepted["status"] == 200, accepted
    for figures in refusals:
        assert (figures["status"], figures["field"]) == (422, "events"), figures
        assert figures["cpu_seconds"] < accepted["cpu_seconds"], (figures, accepted)
        # What is left of a refusal is the parse of its body, bounded by the body limit:
        # 349,000 empty objects are 32 MB of dicts to orjson (an accepted 1 MB body of
        # such values costs as much), against 18 MB for the accepted batch; 1.6 GB before.
        assert figures["growth_kib"] < 4 * accepted["growth_kib"], (figures, accepted)


def test_names_are_one_to_two_hundred_characters_and_not_blank(call: Any, tables: Tables) -> None:
    # A blank tool name reached undo_core's define_tool, which raised: a 500.
    saga = begin(call)
    assert call(f"/sagas/{saga}/steps", {"tool_name": "t" * 200}).status_code == 201
    assert call("/sagas", {"name": "n" * 200}).status_code == 201
    tables.mark()
    refused(call(f"/sagas/{saga}/steps", {"tool_name": "t" * 201}), 422, "tool_name", "at most")
    refused(call(f"/sagas/{saga}/steps", {"tool_name": " \f\n"}), 422, "tool_name", "blank")
    refused(call("/sagas", {"name": "\t"}), 422, "name")
    refused(call("/sagas", {"name": "n", "id": "i" * 101}), 422, "id", "at most 100")
    tables.unchanged()


def test_an_oversized_body_is_a_json_413_and_stores_nothing(
    call: Any, settings: Any, tables: Tables
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2000
    saga = begin(call)
    tables.mark()
    body = {"tool_name": "t", "input": "x" * 2000}
    error = refused(call(f"/sagas/{saga}/steps", body), 413, None, "SAGABOARD_API_MAX_BODY")
    assert error["code"] == "payload_too_large"
    tables.unchanged()
    assert call(f"/sagas/{saga}/steps", {"tool_name": "t", "input": "x" * 1800}).status_code == 201

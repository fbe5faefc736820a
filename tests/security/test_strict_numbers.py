"""Numbers in request bodies (issue 36): integers are integers, and how large one may be.

``"seq": true`` and ``"seq": 1.0`` were taken as 1 (pydantic's lax mode): a boolean, a
float or a string is not an integer, and the event schema's integer (and boolean) fields
now refuse them naming the field. A 5,000-digit integer was answered "not valid JSON"
although the docs said integers of any size round-trip: Python refuses to convert more
than ``sys.get_int_max_str_digits()`` digits (4300 by default), so an integer up to that
round-trips exactly and a longer one is a 422 naming where it is and why.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.infra.http.json_body import BadValue, parse_json
from sagaboard.models import Project, Step
from tests.security.test_hostile_input import AT_ATTEMPT, digests, refused_naming, tampered
from tests.support.agent_runs import storebot_events
from tests.support.fuzz_data import DatabaseState

pytestmark = pytest.mark.django_db

DIGITS = sys.int_info.default_max_str_digits  # 4300: what the docs promise
TOO_LONG = f"integer too large (more than {DIGITS} digits)"


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

        def get(self, path: str) -> Any:
            return client.get(f"/api/v1{path}", headers=headers)

    return Api()


INTEGER_FIELDS = [
    (0, "saga.seq"),
    (0, "event.seq"),
    (0, "saga.next_step_number"),
    (1, "step.position"),
    (AT_ATTEMPT, "step.attempts[0].number"),
]


@pytest.mark.parametrize("value", [True, False, 1.0, 2.0, "1"], ids=repr)
@pytest.mark.parametrize(("index", "path"), INTEGER_FIELDS)
def test_a_boolean_float_or_string_is_not_an_integer(
    api: Any, index: int, path: str, value: Any
) -> None:
    before = digests()
    response = api.post("/events", {"events": tampered(index, path, value)})
    assert "valid integer" in refused_naming(response, f"events[{index}].{path}", index)
    assert DatabaseState.changed(before, digests()) == []


@pytest.mark.parametrize("value", [1, 0, "true", "false", 1.0], ids=repr)
@pytest.mark.parametrize("path", ["step.has_undo", "step.requires_approval"])
def test_an_integer_or_string_is_not_a_boolean(api: Any, path: str, value: Any) -> None:
    before = digests()
    response = api.post("/events", {"events": tampered(1, path, value)})
    assert "valid boolean" in refused_naming(response, f"events[1].{path}", 1)
    assert DatabaseState.changed(before, digests()) == []


def test_a_manual_flow_step_takes_only_a_boolean_for_requires_approval(api: Any) -> None:
    saga = api.post("/sagas", {"event_id": "b", "name": "n"}).json()["id"]
    before = digests()
    for value in (1, "true"):
        body = {"event_id": "s", "tool_name": "t", "requires_approval": value}
        response = api.post(f"/sagas/{saga}/steps", body)
        assert "valid boolean" in refused_naming(response, "requires_approval")
    assert DatabaseState.changed(before, digests()) == []
    body = {"event_id": "s", "tool_name": "t", "requires_approval": True}
    assert api.post(f"/sagas/{saga}/steps", body).status_code == 201


def test_genuine_integers_and_booleans_are_still_taken(api: Any) -> None:
    response = api.post("/events", {"events": storebot_events()})
    assert response.status_code == 200, response.content


def with_literal(events: list[dict[str, Any]], literal: str) -> str:
    """The batch as JSON with the string ``"@"`` swapped for a raw JSON ``literal``."""
    return json.dumps({"events": events}).replace('"@"', literal)


@pytest.mark.parametrize("sign", ["", "-"], ids=["positive", "negative"])
def test_an_integer_of_the_documented_size_round_trips_exactly(api: Any, sign: str) -> None:
    big = int(sign + "9" * DIGITS)
    events = storebot_events()
    for event in events:
        if event["step"] is not None and event["step"]["id"] == "step-1":
            event["step"]["input"] = {"n": big, "list": [big, 1]}
    response = api.post("/events", {"events": events})
    assert response.status_code == 200, response.content
    step_id = "step-1"
    stored = Step.objects.get(step_id=step_id).input
    assert stored == {"n": big, "list": [big, 1]} and type(stored["n"]) is int
    saga = api.get(f"/sagas/{events[0]['saga']['id']}").json()
    (shown,) = [s for s in saga["steps"] if s["id"] == step_id]
    assert shown["input"] == {"n": big, "list": [big, 1]}
    again = api.post("/events", {"events": events}).json()["results"]
    assert {r["status"] for r in again} == {"duplicate"}


@pytest.mark.parametrize("digits", [DIGITS + 1, 5000, 100_000])
@pytest.mark.parametrize("sign", ["", "-"], ids=["positive", "negative"])
@pytest.mark.parametrize(
    ("index", "path", "field"),
    [
        (1, "step.input", "step.input.n"),
        (2, "step.output", "step.output.n"),
        (0, "saga.state", "saga.state.n"),
        (1, "step.metadata", "step.metadata.n"),
    ],
)
def test_an_integer_past_the_documented_size_is_refused_naming_it(
    api: Any, index: int, path: str, field: str, digits: int, sign: str
) -> None:
    before = digests()
    data = with_literal(tampered(index, path, {"n": "@"}), sign + "7" * digits)
    response = api.post_text("/events", data)
    message = refused_naming(response, f"events[{index}].{field}", index)
    assert TOO_LONG in message and "not valid JSON" not in message
    assert DatabaseState.changed(before, digests()) == []


def test_an_integer_field_past_the_documented_size_is_refused_naming_it(api: Any) -> None:
    before = digests()
    data = with_literal(tampered(0, "saga.seq", "@"), "1" * 5000)
    assert TOO_LONG in refused_naming(api.post_text("/events", data), "events[0].saga.seq", 0)
    assert DatabaseState.changed(before, digests()) == []


def test_a_manual_flow_value_past_the_documented_size_is_refused_naming_it(api: Any) -> None:
    saga = api.post("/sagas", {"event_id": "b", "name": "n"}).json()["id"]
    before = digests()
    body = json.dumps({"event_id": "a", "tool_name": "t", "input": {"n": ["@"]}})
    response = api.post_text(f"/sagas/{saga}/steps", body.replace('"@"', "5" * 5000))
    assert TOO_LONG in refused_naming(response, "input.n[0]")
    assert DatabaseState.changed(before, digests()) == []


def test_the_parser_names_the_first_long_integer_and_keeps_the_rest_exact() -> None:
    assert parse_json(b'{"a": [1, ' + b"9" * DIGITS + b"]}") == {"a": [1, int("9" * DIGITS)]}
    with pytest.raises(BadValue) as refused:
        parse_json(b'{"a": [1, {"b": ' + b"9" * (DIGITS + 1) + b"}]}")
    assert refused.value.path == "a[1].b" and TOO_LONG in refused.value.reason
    with pytest.raises(BadValue) as whole:
        parse_json(b"-" + b"9" * 5000)
    assert whole.value.path == "" and TOO_LONG in str(whole.value)
    # NaN is still not JSON, long integer or not (the standard parser reads such a body).
    with pytest.raises(ValueError, match="NaN"):
        parse_json(b'{"a": ' + b"9" * 5000 + b', "b": NaN}')


def test_the_docs_state_the_size_of_integer_that_round_trips() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    # The README's limits table and Slack section moved to the manual (issue 33).
    for doc in ("docs/api.md", "docs/operator/email-and-slack.md"):
        text = (root / doc).read_text()
        assert "integers of any size" not in text, doc
        assert f"{DIGITS} digits" in text, doc
    for doc in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        assert "integers of any size" not in doc.read_text(), doc

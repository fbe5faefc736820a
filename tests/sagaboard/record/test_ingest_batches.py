"""Batches on the fast path: a constant number of queries, log ids matched to their events,
digests of the events as sent (and of events stored before that), JSON text written in bulk."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from sagaboard.access.services.tokens import token_create
from sagaboard.api.event_schema import EventBatchIn
from sagaboard.models import Event, Project, Step
from sagaboard.record.services.ingest import events_ingest
from tests.support.agent_runs import storebot_events

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]


@pytest.fixture
def project() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def post(client: Client, project: Project) -> Any:
    token = token_create(project=project, label="bulk").secret

    def post(body: Any) -> Any:
        data = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return client.post(
            "/api/v1/events",
            data,
            content_type="application/json",
            headers={"Authorization": f"Bearer {token}"},
        )

    return post


def queries_for(post: Any, events: list[dict[str, Any]]) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = post({"events": events})
    assert response.status_code == 200, response.content
    return len(ctx.captured_queries)


def test_a_batch_costs_the_same_queries_whatever_its_size(post: Any) -> None:
    queries_for(post, storebot_events("warm-up"))  # the token's first use records "last used"
    one_saga = queries_for(post, storebot_events("one"))
    six_sagas = [e for n in range(6) for e in storebot_events(f"six-{n}")]
    assert queries_for(post, six_sagas) == one_saga


def test_each_result_carries_the_log_id_of_its_own_event(post: Any) -> None:
    events = [e for n in range(3) for e in storebot_events(f"ids-{n}")]
    results = post({"events": events}).json()["results"]
    stored = dict(Event.objects.values_list("client_event_id", "pk"))
    assert [r["event_id"] for r in results] == [e["event_id"] for e in events]
    assert all(r["log_id"] == stored[r["event_id"]] for r in results)


def test_a_resent_event_with_its_keys_in_another_order_is_a_duplicate(post: Any) -> None:
    events = storebot_events()
    first = post({"events": events}).json()["results"]
    shuffled = [dict(reversed(list(e.items()))) for e in events]
    again = post({"events": shuffled}).json()["results"]
    assert [r["status"] for r in again] == ["duplicate"] * len(events)
    assert [r["log_id"] for r in again] == [r["log_id"] for r in first]


def test_an_event_stored_with_an_old_digest_is_still_recognised(
    post: Any, project: Project
) -> None:
    events = storebot_events()
    # Without the events as sent, digests are made the way they were before.
    events_ingest(project=project, events=EventBatchIn.model_validate({"events": events}).events)
    again = post({"events": events}).json()["results"]
    assert [r["status"] for r in again] == ["duplicate"] * len(events)
    changed = json.loads(json.dumps(events[0]))
    changed["saga"]["name"] = "something else"
    conflict = post({"events": [changed]})
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "conflict"


def test_nan_is_not_json_and_gets_a_400(post: Any) -> None:
    body = json.dumps({"events": storebot_events()})
    body = body.replace('"input": {', '"input": {"x": NaN, ', 1)
    assert "NaN" in body
    response = post(body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"
    assert not Event.objects.exists()


def test_values_orjson_cannot_write_are_stored_exactly(post: Any) -> None:
    events = storebot_events()
    huge = {"big": 2**70 + 1, "small": -(2**64) - 1, "float": 0.1, "text": "é\u2028"}
    for event in events:
        if event["step"] is not None and event["step"]["id"] == "step-1":
            event["step"]["input"] = huge
    assert post({"events": events}).status_code == 200
    stored = Step.objects.get(step_id="step-1").input
    assert stored == huge and type(stored["big"]) is int and type(stored["small"]) is int
    again = post({"events": events}).json()["results"]  # and its digest is stable
    assert {r["status"] for r in again} == {"duplicate"}


def test_a_long_number_does_not_let_nan_through(post: Any) -> None:
    body = json.dumps({"events": storebot_events()})
    body = body.replace('"input": {', '"input": {"id": 12345678901234567890, "x": NaN, ', 1)
    response = post(body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"

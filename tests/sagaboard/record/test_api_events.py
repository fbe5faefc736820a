"""API v1: transition events from agents, reading sagas back, and every way to get it wrong."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from sagaboard.access.services.tokens import token_create, token_revoke
from sagaboard.models import Event, Project, Saga, Step
from tests.support.agent_runs import storebot_events

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]


@pytest.fixture
def project() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def token(project: Project) -> str:
    return token_create(project=project, label="storebot").secret


@pytest.fixture
def api(client: Client, token: str) -> Any:
    class Api:
        def post(self, path: str, body: Any, raw: bool = False, auth: str | None = token) -> Any:
            headers = {"Authorization": f"Bearer {auth}"} if auth else {}
            data = body if raw else json.dumps(body)
            return client.post(
                f"/api/v1{path}", data, content_type="application/json", headers=headers
            )

        def get(self, path: str, auth: str | None = token, **params: Any) -> Any:
            headers = {"Authorization": f"Bearer {auth}"} if auth else {}
            return client.get(f"/api/v1{path}", params, headers=headers)

    return Api()


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]  # type: ignore[no-any-return]


# ---------------------------------------------------------------- the happy path


def test_storebot_events_build_the_seeds_final_states(api: Any) -> None:
    events = storebot_events()
    response = api.post("/events", {"events": events})
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["applied"] * len(events)
    assert [r["log_id"] for r in results] == sorted(r["log_id"] for r in results)

    saga = api.get("/sagas/storebot-1").json()
    assert saga["status"] == "ROLLED_BACK" and saga["driver"] == "client"
    assert [(s["id"], s["tool_name"], s["state"]) for s in saga["steps"]] == [
        ("step-1", "return_item", "ROLLED_BACK"),
        ("step-2", "refund_payment", "ROLLED_BACK"),
        ("step-3", "generate_label", "FAILED"),
    ]
    assert saga["steps"][2]["error"] == "FedEx API returned 500"
    assert saga["steps"][0]["attempts"][0]["outcome"] == "succeeded"
    undo_order = list(
        Event.objects.filter(to_state="ROLLED_BACK", kind="step")
        .order_by("id")
        .values_list("step_id", flat=True)
    )
    assert undo_order == ["step-2", "step-1"]


def test_events_can_arrive_one_request_at_a_time(api: Any) -> None:
    for event in storebot_events():
        assert api.post("/events", {"events": [event]}).status_code == 200
    assert Saga.objects.get(saga_id="storebot-1").status == "ROLLED_BACK"


def test_a_repeated_batch_is_accepted_once_with_the_same_answer(api: Any) -> None:
    events = storebot_events()
    first = api.post("/events", {"events": events}).json()["results"]
    again = api.post("/events", {"events": events}).json()["results"]
    assert [r["status"] for r in again] == ["duplicate"] * len(events)
    assert [r["log_id"] for r in again] == [r["log_id"] for r in first]
    assert Event.objects.count() == len(events)


def test_any_string_content_round_trips(api: Any) -> None:
    events = storebot_events()
    hostile = {"note": "<script>alert(1)</script>", "nul": "a\u0000b", "emoji": "🧾", "q": "'\""}
    for event in events:
        if event["step"] and event["step"]["id"] == "step-2":
            event["step"]["input"] = hostile
    assert api.post("/events", {"events": events}).status_code == 200
    saga = api.get("/sagas/storebot-1").json()
    assert saga["steps"][1]["input"] == hostile


# ---------------------------------------------------------------- refusals


def test_requests_without_a_valid_token_are_refused(api: Any, project: Project) -> None:
    events = {"events": storebot_events()}
    for auth in (None, "nonsense", "sgb_deadbeef_nope"):
        response = api.post("/events", events, auth=auth)
        assert response.status_code == 401
        assert error_of(response)["code"] == "unauthorized"
    minted = token_create(project=project, label="old")
    token_revoke(token=minted.token, reason="rotated")
    assert api.post("/events", events, auth=minted.secret).status_code == 401
    assert api.get("/sagas", auth=minted.secret).status_code == 401
    assert Event.objects.count() == 0


def test_a_token_never_sees_another_projects_saga(api: Any) -> None:
    api.post("/events", {"events": storebot_events()})
    other = token_create(project=Project.objects.create(slug="other", name="Other"), label="x")
    response = api.get("/sagas/storebot-1", auth=other.secret)
    assert response.status_code == 404 and error_of(response)["code"] == "not_found"
    assert api.get("/sagas", auth=other.secret).json()["items"] == []
    # The same saga id posted by the other project is its own saga, not a write into ours.
    assert api.post("/events", {"events": storebot_events()}, auth=other.secret).status_code == 200
    assert Saga.objects.filter(saga_id="storebot-1").count() == 2


def test_completing_a_step_twice_is_an_illegal_transition(api: Any) -> None:
    events = storebot_events()
    api.post("/events", {"events": events[:3]})  # saga, step-1 PENDING, step-1 COMPLETED
    replay = json.loads(json.dumps(events[2]))
    replay["event_id"] = "other-id"
    replay["event"]["seq"] = replay["saga"]["seq"] = 4
    response = api.post("/events", {"events": [replay]})
    assert response.status_code == 409
    err = error_of(response)
    assert err["code"] == "illegal_transition" and re.search(r"\bCOMPLETED\b", err["message"])
    assert err["index"] == 0 and err["event_id"] == "other-id"


def test_failing_a_rolled_back_step_is_refused(api: Any) -> None:
    events = storebot_events()
    api.post("/events", {"events": events})
    last = events[-1]
    bad = {
        **last,
        "event_id": "late-failure",
        "saga": {**last["saga"], "seq": last["saga"]["seq"] + 1},
        "step": {**events[3]["step"], "state": "FAILED"},  # step-1
        "event": {
            **last["event"],
            "seq": last["saga"]["seq"] + 1,
            "kind": "step",
            "step_id": "step-1",
            "from_state": "ROLLED_BACK",
            "to_state": "FAILED",
        },
    }
    response = api.post("/events", {"events": [bad]})
    assert response.status_code == 409
    assert "ROLLED_BACK to FAILED" in error_of(response)["message"]


def test_a_step_for_an_unknown_saga_is_refused(api: Any) -> None:
    response = api.post("/events", {"events": storebot_events()[1:2]})
    assert response.status_code == 422
    assert error_of(response)["code"] == "unknown_saga"


def test_a_reused_event_id_with_other_content_is_a_conflict(api: Any) -> None:
    events = storebot_events()
    api.post("/events", {"events": events[:2]})
    forged = json.loads(json.dumps(events[1]))
    forged["step"]["input"] = {"itemId": "999"}
    response = api.post("/events", {"events": [forged]})
    assert response.status_code == 409 and error_of(response)["code"] == "conflict"


def test_an_older_event_with_a_new_id_is_stale(api: Any) -> None:
    events = storebot_events()
    api.post("/events", {"events": events[:4]})
    old = {**events[1], "event_id": "replayed-with-new-id"}
    response = api.post("/events", {"events": [old]})
    assert response.status_code == 409 and error_of(response)["code"] == "stale_event"


def test_a_batch_is_all_or_nothing_and_names_the_bad_event(api: Any) -> None:
    events = storebot_events()
    events[4] = {**events[4], "step": {**events[4]["step"], "state": "ROLLED_BACK"}}
    response = api.post("/events", {"events": events})
    assert response.status_code == 422
    err = error_of(response)
    assert err["index"] == 4 and err["event_id"] == events[4]["event_id"]
    assert Event.objects.count() == 0 and Saga.objects.count() == 0 and Step.objects.count() == 0


def test_malformed_json_gets_a_400(api: Any) -> None:
    response = api.post("/events", '{"events": [', raw=True)
    assert response.status_code == 400 and error_of(response)["code"] == "malformed_json"


def test_unknown_and_missing_fields_are_named(api: Any) -> None:
    event = storebot_events()[0]
    response = api.post("/events", {"events": [{**event, "surprise": 1}]})
    err = error_of(response)
    assert response.status_code == 422 and err["field"] == "events[0].surprise"
    del event["saga"]["name"]
    err = error_of(api.post("/events", {"events": [event]}))
    assert err["field"] == "events[0].saga.name" and err["index"] == 0
    assert error_of(api.post("/events", {"events": []}))["field"] == "events"


def test_an_oversized_body_gets_a_413(api: Any, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2000
    event = storebot_events()[1]
    event["step"]["input"] = {"blob": "x" * 5000}
    response = api.post("/events", {"events": [event]})
    assert response.status_code == 413 and error_of(response)["code"] == "payload_too_large"


def test_a_batch_over_the_limit_is_refused(api: Any, settings: Any) -> None:
    settings.SAGABOARD_API_MAX_BATCH = 3
    response = api.post("/events", {"events": storebot_events()})
    assert response.status_code == 422 and "at most 3" in error_of(response)["message"]


# ---------------------------------------------------------------- listing


def test_list_filters_and_pages_with_a_cursor(api: Any) -> None:
    for n in range(7):
        api.post("/events", {"events": storebot_events(f"saga-{n}")})
    page = api.get("/sagas", limit=3).json()
    seen = [s["id"] for s in page["items"]]
    while page["next_cursor"]:
        page = api.get("/sagas", limit=3, cursor=page["next_cursor"]).json()
        seen += [s["id"] for s in page["items"]]
    assert sorted(seen) == [f"saga-{n}" for n in range(7)] and len(set(seen)) == 7
    assert len(api.get("/sagas", status="ROLLED_BACK").json()["items"]) == 7
    assert api.get("/sagas", status="COMPLETED").json()["items"] == []
    assert len(api.get("/sagas", tool="refund_payment").json()["items"]) == 7
    assert [s["id"] for s in api.get("/sagas", q="saga-3").json()["items"]] == ["saga-3"]


def test_list_rejects_a_bad_cursor_and_limit(api: Any) -> None:
    assert error_of(api.get("/sagas", cursor="garbage!"))["field"] == "cursor"
    assert error_of(api.get("/sagas", limit=0))["field"] == "limit"


def test_the_schema_and_docs_are_served(client: Client) -> None:
    schema = client.get("/api/v1/openapi.json")
    assert schema.status_code == 200
    assert "/api/v1/events" in schema.json()["paths"]
    assert client.get("/api/v1/docs").status_code == 200


def test_the_event_log_reads_back_in_order_with_a_cursor(api: Any) -> None:
    events = storebot_events()
    api.post("/events", {"events": events})
    page = api.get("/sagas/storebot-1/events", limit=4).json()
    seen = page["items"]
    while page["next_after"]:
        page = api.get("/sagas/storebot-1/events", limit=4, after=page["next_after"]).json()
        seen += page["items"]
    assert [e["seq"] for e in seen] == list(range(1, len(events) + 1))
    assert [e["event_id"] for e in seen] == [e["event_id"] for e in events]
    assert error_of(api.get("/sagas/nope/events"))["code"] == "not_found"


def test_times_round_trip_exactly(api: Any) -> None:
    from datetime import datetime

    events = storebot_events()
    api.post("/events", {"events": events})
    step = api.get("/sagas/storebot-1").json()["steps"][0]
    sent = next(e["step"] for e in reversed(events) if e["step"] and e["step"]["id"] == "step-1")
    for name in ("created_at", "updated_at", "completed_at"):
        assert datetime.fromisoformat(step[name]) == datetime.fromisoformat(sent[name]), name


def test_a_list_page_costs_the_same_queries_whatever_the_size(
    api: Any, django_assert_max_num_queries: Any
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries_for_a_page() -> int:
        with CaptureQueriesContext(connection) as ctx:
            page = api.get("/sagas", limit=2).json()
            api.get("/sagas", limit=2, cursor=page["next_cursor"])
        return len(ctx.captured_queries)

    for n in range(3):
        api.post("/events", {"events": storebot_events(f"small-{n}")})
    small = queries_for_a_page()
    for n in range(12):
        api.post("/events", {"events": storebot_events(f"more-{n}")})
    assert queries_for_a_page() == small
    with django_assert_max_num_queries(small):
        api.get("/sagas", limit=50)


def test_an_operators_rollback_request_is_in_the_answer_to_the_agents_next_events(
    api: Any, project: Project
) -> None:
    from sagaboard.actions.services import saga_stop
    from tests.support.hitl import person

    events = storebot_events("stop-1")
    first = [e for e in events if e["saga"]["status"] == "IN_PROGRESS"][:2]
    answer = api.post("/events", {"events": first[:1]}).json()
    assert "rollback_requested" not in answer  # nothing asked: the plain answer
    saga = Saga.objects.get(saga_id="stop-1")
    ann = person("ann", "operator", project)
    saga_stop.rollback_request(saga_pk=saga.pk, user=ann, reason="wrong customer")
    another = api.post("/events", {"events": storebot_events("stop-other")[:1]}).json()
    assert "rollback_requested" not in another  # another saga's batch hears nothing
    answer = api.post("/events", {"events": first[1:2]}).json()
    assert answer["rollback_requested"] == [
        {"saga_id": "stop-1", "by": "user:ann", "reason": "wrong customer",
         "at": answer["rollback_requested"][0]["at"]},
    ]  # fmt: skip
    listed = api.get("/rollback-requests").json()["rollback_requested"]
    assert [r["saga_id"] for r in listed] == ["stop-1"]
    rest = events[2:]  # the agent's rollback: the saga leaves IN_PROGRESS, the request closes
    assert api.post("/events", {"events": rest}).status_code == 200
    assert api.get("/rollback-requests").json() == {"rollback_requested": []}
    saga.refresh_from_db()
    assert saga.rollback_request_done_at is not None


def test_the_rollback_requests_of_another_project_are_not_listed(
    api: Any, project: Project, client: Client
) -> None:
    from sagaboard.actions.services import saga_stop
    from tests.support.hitl import person

    api.post("/events", {"events": storebot_events("stop-2")[:1]})
    saga = Saga.objects.get(saga_id="stop-2")
    saga_stop.rollback_request(saga_pk=saga.pk, user=person("ann", "operator", project), reason="x")
    other = Project.objects.create(slug="other", name="Other")
    elsewhere = token_create(project=other, label="x").secret
    assert api.get("/rollback-requests", auth=elsewhere).json() == {"rollback_requested": []}

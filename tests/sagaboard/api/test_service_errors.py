"""One service error, one map to HTTP (sagaboard.errors, sagaboard.api.errors).

The API tests pin each refusal's body; these pin the map itself: whatever raises a
``ServiceError`` (or a subclass) is answered with its status, body and headers, by any
API ``errors.install`` was given, and the pages' refusals carry the same status.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.db import OperationalError
from ninja import NinjaAPI, Router
from ninja.testing import TestClient

from sagaboard.api import errors
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.errors import ServiceError
from sagaboard.infra.http.limits import InputRefused
from sagaboard.infra.http.rate_limits import RateLimited
from sagaboard.record.services.ingest import IngestError


def _refused_event() -> IngestError:
    error = IngestError(422, "unknown_step", "no step 'step-9'", "event.step.id")
    error.index, error.event_id = 3, "e-3"  # as events_ingest names the event it refused
    return error


RAISED: dict[str, Exception] = {
    "conflict": ServiceError(409, "conflict", "a concurrent request won", "event_id"),
    "ingest": _refused_event(),
    "input": InputRefused("events[2].x: too deep", "events[2].x", 2),
    "limited": RateLimited(7, "failed authentications from this address"),
    "busy": ServiceError(503, "busy", "retry"),
    "database": OperationalError("database is locked"),
    "bug": ZeroDivisionError("a bug"),
}


def _client() -> TestClient:
    """A fresh API with one router, as api_decisions is mounted: the map covers routers."""
    api = NinjaAPI(urls_namespace="service-errors-test")
    router = Router()

    @router.get("/{name}")
    def fail(request: Any, name: str) -> None:
        raise RAISED[name]

    api.add_router("/", router)
    errors.install(api)
    return TestClient(api)


def test_a_service_error_is_answered_with_its_status_code_message_and_field() -> None:
    response = _client().get("/conflict")
    assert response.status_code == 409
    assert response.json() == {
        "error": {"code": "conflict", "message": "a concurrent request won", "field": "event_id"}
    }


def test_an_ingestion_refusal_names_its_event_in_the_batch() -> None:
    body = _client().get("/ingest").json()["error"]
    assert body == {
        "code": "unknown_step",
        "message": "no step 'step-9'",
        "field": "event.step.id",
        "index": 3,
        "event_id": "e-3",
    }


def test_a_value_refused_in_a_batch_is_a_422_validation_error_with_its_index() -> None:
    response = _client().get("/input")
    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "validation_error",
        "message": "events[2].x: too deep",
        "field": "events[2].x",
        "index": 2,
    }


def test_a_rate_limit_is_a_429_that_says_when_to_retry() -> None:
    response = _client().get("/limited")
    assert response.status_code == 429
    assert response["Retry-After"] == "7"
    assert response.json()["error"] == {
        "code": "rate_limited",
        "message": "too many failed authentications from this address: retry after 7 s",
    }


@pytest.mark.parametrize("name", ["busy", "database"])
def test_every_503_tells_the_client_to_retry_in_a_second(name: str) -> None:
    response = _client().get(f"/{name}")
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert response.json()["error"]["code"] == {"busy": "busy", "database": "unavailable"}[name]


def test_a_crash_is_a_logged_500_in_the_same_shape(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="sagaboard.api.v1"):
        response = _client().get("/bug")
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "internal_error", "message": "the server failed; nothing was applied"}
    }
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [ZeroDivisionError]


@pytest.mark.parametrize(
    ("code", "status"),
    [("validation_error", 400), ("forbidden", 403), ("not_found", 404),
     ("already_decided", 409), ("void", 409)],
)  # fmt: skip
def test_a_refused_decision_carries_the_status_the_pages_answer_with(
    code: str, status: int
) -> None:
    refused = DecisionRefused(code, "no", "reason")
    assert isinstance(refused, ServiceError)
    assert (refused.status, refused.code, refused.message, refused.field) == (
        status, code, "no", "reason"
    )  # fmt: skip

"""What one POST of events costs in queries: a fixed few, whatever the batch's size.

Pinned so that a change adding a query per event (or per saga) to ingestion fails here,
not only in the benchmark: a 100-event batch of new sagas and a single event are the
two shapes agents send (SagaboardStore batches; a bare client posts one at a time).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from sagaboard.access.services.tokens import token_create
from sagaboard.models import Event, Project, Saga
from tests.support.agent_runs import post_events
from tests.support.live_server import EventRecorder
from undo_core import Saga as LocalSaga
from undo_core import define_tool

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]

TOOLS = [define_tool(f"tool_{n}", lambda i: {"ok": i}, lambda o, i: None) for n in range(4)]
BATCH_QUERIES = 9
"""The token version, BEGIN, three SELECTs (sagas with their rollback requests, seen
events, steps), three INSERTs (sagas, steps, events), COMMIT."""
SINGLE_QUERIES = 7
"""A saga's first event alone: the same statements less the steps' SELECT and INSERT."""


def sagas_events(count: int) -> list[dict[str, Any]]:
    """The events of ``count`` completed sagas of four steps (10 events each); the engine
    gives each saga a fresh id."""
    recorder = EventRecorder()
    for n in range(count):
        saga = LocalSaga(f"pinned-{n}", store=recorder)
        for tool in TOOLS:
            saga.execute(tool, {"n": n})
        saga.complete()
    return recorder.events


@pytest.fixture
def post(client: Client) -> Any:
    project = Project.objects.create(slug="shop", name="Shop")
    token = token_create(project=project, label="pins").secret

    def post(events: list[dict[str, Any]]) -> int:
        with CaptureQueriesContext(connection) as ctx:
            response = post_events(client, token, events)
        assert response.status_code == 200, response.content
        return len(ctx.captured_queries)

    post(sagas_events(1))  # the token's first use records "last used" (once a minute)
    return post


def test_a_batch_of_100_events_of_new_sagas_takes_a_fixed_few_queries(post: Any) -> None:
    events = sagas_events(10)
    assert len(events) == 100
    assert post(events) <= BATCH_QUERIES
    assert Saga.objects.count() == 11
    assert Event.objects.count() == 110


def test_a_single_event_takes_the_statements_of_a_batch_of_one(post: Any) -> None:
    assert post(sagas_events(1)[:1]) <= SINGLE_QUERIES


def test_a_batch_continuing_stored_sagas_takes_a_fixed_few_queries(post: Any) -> None:
    events = sagas_events(10)
    post(events[:55])  # the fifth saga is half stored
    # The rest: UPDATEs of the stored saga and step, and one query for its steps' states
    # (what the rules compare a saga's end with) join the statements of a batch.
    assert post(events[55:]) <= BATCH_QUERIES + 3

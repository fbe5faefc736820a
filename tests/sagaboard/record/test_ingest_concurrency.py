"""Two requests carrying the same events at the same instant (an SDK retry racing its
original): every event is stored once, and the loser is told to retry, never a 5xx crash."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from sagaboard.api.event_schema import EventBatchIn
from sagaboard.models import Event, Project, Saga
from sagaboard.record.services.ingest import IngestError, events_ingest
from tests.support.agent_runs import storebot_events

pytestmark = [
    pytest.mark.slow,  # threads racing on real transactions
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("record_verified"),
]


def post_with_retries(project: Project, events: list[Any], outcomes: list[Any]) -> None:
    batch = EventBatchIn.model_validate({"events": events}).events
    try:
        for _ in range(20):
            try:
                results = events_ingest(project=project, events=batch, sent=events).results
                outcomes.append([r.status for r in results])
                return
            except IngestError as err:
                assert err.status == 503 and err.code == "busy", (err.status, err.code)
                outcomes.append("busy")
    finally:
        connection.close()


@pytest.mark.parametrize("round_", range(3))
def test_racing_identical_batches_store_each_event_once(round_: int) -> None:
    project = Project.objects.create(slug=f"race-{round_}", name="Race")
    events = storebot_events(f"race-saga-{round_}")
    outcomes: list[Any] = []
    threads = [
        threading.Thread(target=post_with_retries, args=(project, events, outcomes))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    finals = [o for o in outcomes if o != "busy"]
    assert len(finals) == 2, outcomes
    assert sorted(set(finals[0]) | set(finals[1])) <= ["applied", "duplicate"]
    assert Event.objects.filter(project=project).count() == len(events)
    assert Saga.objects.get(project=project).status == "ROLLED_BACK"

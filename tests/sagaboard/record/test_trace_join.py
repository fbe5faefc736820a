"""One trace from the agent to sagaboard's worker: the SDK sends the agent's span with the
step (W3C traceparent), sagaboard keeps it on the step, its worker's undo span is a child of
it, and the saga and step pages link to the trace when SAGABOARD_TRACE_URL is set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sagaboard.access.services.tokens import token_create
from sagaboard.actions.services import runner
from sagaboard.config.wsgi import application
from sagaboard.models import Project, Saga, Step
from tests.support.hitl import person
from tests.support.webhook_receiver import Receiver
from undo_core import tracing
from undo_core.remote import SagaboardClient

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def sdk(shop: Project) -> Iterator[SagaboardClient]:
    """The SDK's client, in this process, against the Django app itself (on the test's
    connection: as Django's test client does, requests do not close it)."""
    secret = token_create(project=shop, label="agent").secret
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        with SagaboardClient(
            "http://testserver", secret, transport=httpx.WSGITransport(app=application)
        ) as client:
            yield client
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()


def test_the_agents_span_the_step_and_the_workers_undo_are_one_trace(
    spans: InMemorySpanExporter, sdk: SagaboardClient, receiver: Receiver
) -> None:
    agent = trace.get_tracer_provider().get_tracer("agent")
    with agent.start_as_current_span("agent turn") as turn:
        saga_id = sdk.begin("refund-flow")["id"]
        with agent.start_as_current_span("call refund_payment") as tool_span:
            step_id = sdk.add_step(
                saga_id, "refund_payment", {"chargeId": "ch_1"},
                undo={"kind": "webhook", "url": receiver.url},
            )["id"]  # fmt: skip
            sdk.complete_step(saga_id, step_id, {"id": "re_1"})
        sdk.rollback(saga_id, reason="customer cancelled")
    step = Step.objects.get(saga__saga_id=saga_id)
    kept = tracing.parse_traceparent(step.metadata[tracing.METADATA_KEY])
    assert kept == (f"{turn.get_span_context().trace_id:032x}",
                    f"{tool_span.get_span_context().span_id:016x}")  # fmt: skip

    saga = Saga.objects.get(saga_id=saga_id)
    runner.rollback_continue(saga.pk)  # what the worker's task runs
    saga.refresh_from_db()
    assert saga.status == "ROLLED_BACK" and len(receiver.bodies) == 1
    (undo,) = [s for s in spans.get_finished_spans() if s.name == "undo_tool refund_payment"]
    assert undo.context.trace_id == turn.get_span_context().trace_id
    assert undo.parent.span_id == tool_span.get_span_context().span_id
    assert undo.attributes["undo_core.saga.id"] == saga_id


def test_a_step_without_a_span_has_no_traceparent(sdk: SagaboardClient) -> None:
    saga_id = sdk.begin("plain")["id"]
    sdk.add_step(saga_id, "t", {})
    assert tracing.METADATA_KEY not in Step.objects.get(saga__saga_id=saga_id).metadata


def test_a_traceparent_that_is_not_w3c_is_a_400_naming_the_field(
    client: Client, shop: Project
) -> None:
    secret = token_create(project=shop, label="raw").secret
    headers = {"Authorization": f"Bearer {secret}"}
    begun = client.post(
        "/api/v1/sagas", {"name": "x", "event_id": "e-1"}, content_type="application/json",
        headers=headers,
    ).json()  # fmt: skip
    answer = client.post(
        f"/api/v1/sagas/{begun['id']}/steps",
        {"event_id": "e-2", "tool_name": "t", "traceparent": "00-not-a-trace-01"},
        content_type="application/json", headers=headers,
    )  # fmt: skip
    assert answer.status_code in (400, 422)
    assert "traceparent" in answer.content.decode()
    assert not Step.objects.filter(saga__saga_id=begun["id"]).exists()


def test_the_saga_and_step_link_to_the_trace_when_a_trace_url_is_set(
    spans: InMemorySpanExporter, sdk: SagaboardClient, shop: Project, client: Client,
    settings: Any,
) -> None:  # fmt: skip
    agent = trace.get_tracer_provider().get_tracer("agent")
    with agent.start_as_current_span("agent turn") as turn:
        saga_id = sdk.begin("linked")["id"]
        sdk.add_step(saga_id, "t", {})
        sdk.add_step(saga_id, "u", {})
    trace_id = f"{turn.get_span_context().trace_id:032x}"
    steps = {s.step_id: tracing.parse_traceparent(s.metadata[tracing.METADATA_KEY])
             for s in Step.objects.filter(saga__saga_id=saga_id)}  # fmt: skip
    client.force_login(person("olga", "viewer", shop))
    url = f"/sagas/shop/{saga_id}/"
    page = client.get(url).content.decode()
    assert "Open trace" not in page  # not configured: no link
    settings.SAGABOARD_TRACE_URL = "https://jaeger.example/trace/{trace_id}?uiFind={span_id}"
    page = client.get(url).content.decode()
    for step_id, (traced, span_id) in steps.items():
        assert traced == trace_id
        link = f"https://jaeger.example/trace/{trace_id}?uiFind={span_id}"
        assert f'href="{link}"' in page, step_id  # each step's own span
    assert page.count("Open trace") == 3  # the saga's, and one per step

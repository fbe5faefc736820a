"""OpenTelemetry spans from the engine (undo_core.tracing), read back from the SDK's
in-memory exporter: a span per saga, per step's forward call and per undo attempt, under the
caller's own span; errors recorded; payloads only when asked; nothing without a provider."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from undo_core import MemoryStore, Saga, SagaRollbackError, define_tool, tracing


def by_name(exporter: InMemorySpanExporter) -> dict[str, Any]:
    return {s.name: s for s in exporter.get_finished_spans()}


def storebot(undo_fails: bool = False) -> tuple[Any, Any, Any]:
    def undo_refund(out: Any, i: Any) -> None:
        if undo_fails:
            raise ConnectionError("payments API down")

    ret = define_tool("return_item", lambda i: {"ok": True}, lambda out, i: None)
    ref = define_tool("refund_payment", lambda i: {"id": "re_1"}, undo_refund)

    def label(i: Any) -> None:
        raise ConnectionError("FedEx API returned 500")

    return ret, ref, define_tool("generate_label", label)


def test_a_rolled_back_saga_makes_one_trace_under_the_agents_span(
    spans: InMemorySpanExporter,
) -> None:
    ret, ref, label = storebot()
    agent = trace.get_tracer_provider().get_tracer("agent")
    with agent.start_as_current_span("agent turn") as turn:
        saga = Saga("storebot-return", store=MemoryStore())
        saga.execute(ret, {"itemId": "882"})
        saga.execute(ref, {"chargeId": "ch_1"})
        with pytest.raises(SagaRollbackError):
            saga.execute(label, {})
    found = by_name(spans)
    assert set(found) == {
        "agent turn", "saga storebot-return", "execute_tool return_item",
        "execute_tool refund_payment", "execute_tool generate_label",
        "undo_tool refund_payment", "undo_tool return_item",
    }  # fmt: skip
    trace_id = turn.get_span_context().trace_id
    assert {s.context.trace_id for s in found.values()} == {trace_id}
    saga_span = found["saga storebot-return"]
    assert saga_span.parent.span_id == turn.get_span_context().span_id
    assert saga_span.attributes["undo_core.saga.status"] == "ROLLED_BACK"
    step = found["execute_tool refund_payment"]
    assert step.parent.span_id == saga_span.context.span_id
    assert step.attributes["gen_ai.operation.name"] == "execute_tool"
    assert step.attributes["gen_ai.tool.name"] == "refund_payment"
    assert step.attributes["undo_core.step.id"] == "step-2"
    undo = found["undo_tool refund_payment"]
    assert undo.parent.span_id == step.context.span_id  # the undo joins its step
    assert undo.attributes["undo_core.undo.attempt"] == 1
    failed = found["execute_tool generate_label"]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "ConnectionError"
    assert any(e.name == "exception" for e in failed.events)
    # The step keeps its span's traceparent: the SDK sends it, a worker's undo joins it.
    kept = saga.steps[1].metadata[tracing.METADATA_KEY]
    assert tracing.parse_traceparent(kept) == (
        f"{trace_id:032x}", f"{step.context.span_id:016x}"
    )  # fmt: skip


def test_a_failed_undo_attempt_is_an_error_span(spans: InMemorySpanExporter) -> None:
    ret, ref, label = storebot(undo_fails=True)
    saga = Saga("storebot-return")
    saga.execute(ret, {})
    saga.execute(ref, {})
    with pytest.raises(SagaRollbackError):
        saga.execute(label, {})
    found = by_name(spans)
    undo = found["undo_tool refund_payment"]
    assert undo.status.status_code is StatusCode.ERROR
    assert undo.attributes["error.type"] == "ConnectionError"
    assert found["saga storebot-return"].status.status_code is StatusCode.ERROR


def test_payloads_stay_out_of_spans_unless_asked(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = define_tool("charge", lambda i: {"card": "4242"}, lambda out, i: None)
    with Saga("quiet") as saga:
        saga.execute(tool, {"email": "a@example.com"})
    quiet = by_name(spans)["execute_tool charge"].attributes
    assert "undo_core.step.input" not in quiet and "undo_core.step.output" not in quiet
    spans.clear()
    monkeypatch.setenv("UNDO_CORE_TRACE_PAYLOADS", "1")
    with Saga("told") as saga:
        saga.execute(tool, {"email": "a@example.com"})
    told = by_name(spans)["execute_tool charge"].attributes
    assert told["undo_core.step.input"] == '{"email": "a@example.com"}'
    assert told["undo_core.step.output"] == '{"card": "4242"}'


def test_an_undo_in_another_process_joins_the_steps_trace(spans: InMemorySpanExporter) -> None:
    # The agent's process: the step ran and was recorded with its traceparent.
    store = MemoryStore()
    tool = define_tool("refund_payment", lambda i: {"id": "re_1"}, lambda out, i: None)
    saga = Saga("server-undo", store=store, auto_rollback_on_failure=False)
    saga.execute(tool, {})
    step_span = by_name(spans)["execute_tool refund_payment"]
    saga._ledger.abandon()  # the agent's process goes away, leaving the saga open
    spans.clear()
    # A worker: restores it from the store and runs the undo.
    worker = Saga.restore(store, saga.id, [tool], owner="worker-1")
    worker.rollback()
    found = by_name(spans)
    assert set(found) == {"undo_tool refund_payment"}  # no second saga span
    undo = found["undo_tool refund_payment"]
    assert undo.context.trace_id == step_span.context.trace_id
    assert undo.parent.span_id == step_span.context.span_id and undo.parent.is_remote


def test_without_a_provider_no_span_and_no_traceparent() -> None:
    tool = define_tool("t", lambda i: 1, lambda out, i: None)
    with Saga("untraced") as saga:
        saga.execute(tool, {})
    assert tracing.METADATA_KEY not in saga.steps[0].metadata
    assert tracing.saga_trace("s", "n") is None


@pytest.mark.parametrize(
    "value",
    ["", "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "01-" + "a" * 32 + "-" + "b" * 16 + "-01",
     "00-" + "A" * 32 + "-" + "b" * 16 + "-01", None, 7],
)  # fmt: skip
def test_a_value_that_is_not_a_traceparent_is_not_read_as_one(value: object) -> None:
    assert tracing.parse_traceparent(value) is None

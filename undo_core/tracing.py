"""OpenTelemetry spans for sagas, steps and undo attempts (with the ``otel`` extra).

With ``opentelemetry-api`` installed and a tracer provider set by the application,
the engine makes:

- a span per saga, ``saga {name}``, a child of whatever span is current where the
  saga is created (the agent's own trace), ended when the saga ends;
- a span per step's forward call, ``execute_tool {tool}``, a child of the saga's;
  the tool runs inside it, so the tool's own spans (an HTTP call) are its children;
- a span per undo attempt, ``undo_tool {tool}``, a child of the step's span: also
  in another process (a sagaboard worker running a server-side undo), because the
  step keeps its span's W3C ``traceparent`` in its metadata (``METADATA_KEY``), and
  the SDK sends it to sagaboard with the step's events.

Names and attributes follow the OpenTelemetry GenAI "execute tool" span
(``gen_ai.operation.name``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``error.type``) plus ``undo_core.*`` ones (``ATTRIBUTES``). Inputs and outputs are
never recorded unless ``UNDO_CORE_TRACE_PAYLOADS=1`` (they may hold personal data).
Failures are recorded on the span (an exception event, status ERROR).

Without the package, or with no provider set (OpenTelemetry's default no-op
provider), nothing is made and each step costs one ``None`` check.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

try:  # the otel extra
    from opentelemetry import trace as _trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags
except ImportError:  # pragma: no cover - exercised by the fresh-virtualenv check
    _trace = None  # type: ignore[assignment]

__all__ = [
    "ATTRIBUTES",
    "METADATA_KEY",
    "SagaTrace",
    "current_traceparent",
    "parse_traceparent",
    "saga_trace",
]

METADATA_KEY = "traceparent"
"""The step metadata key (and saga option) holding its span's W3C traceparent."""

ATTRIBUTES = {
    "gen_ai.operation.name": "execute_tool (forward call) or undo_tool (an undo attempt)",
    "gen_ai.tool.name": "the tool's name",
    "gen_ai.tool.call.id": "the model's tool call id, when an adapter recorded one",
    "error.type": "the exception's class, on a failed call",
    "undo_core.saga.id": "the saga's id",
    "undo_core.saga.name": "the saga's name",
    "undo_core.saga.status": "the saga's final status (on the saga span)",
    "undo_core.step.id": "the step's id (step-1, ...)",
    "undo_core.undo.attempt": "the undo attempt's number (1, 2, ...)",
    "undo_core.step.input": "the step's input as JSON: only with UNDO_CORE_TRACE_PAYLOADS=1",
    "undo_core.step.output": "the step's output as JSON: only with UNDO_CORE_TRACE_PAYLOADS=1",
}
"""Every attribute the spans carry, and what it holds (docs/sdk.md lists them)."""

_ENDS = frozenset({"COMPLETED", "FAILED", "ROLLED_BACK", "ROLLBACK_FAILED"})
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_PAYLOAD_LIMIT = 4096


def parse_traceparent(value: object) -> tuple[str, str] | None:
    """(trace id, span id) of a W3C ``traceparent`` string, or None if it is not one."""
    if not isinstance(value, str):
        return None
    found = _TRACEPARENT.match(value)
    if found is None or set(found.group(1)) == {"0"} or set(found.group(2)) == {"0"}:
        return None
    return found.group(1), found.group(2)


def _traceparent(span: Any) -> str | None:
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _remote_parent(traceparent: object) -> Any:
    """A context whose current span is the one ``traceparent`` names (in another process)."""
    if _trace is None or not isinstance(traceparent, str):
        return None
    found = _TRACEPARENT.match(traceparent)
    if found is None or parse_traceparent(traceparent) is None:
        return None
    span_context = SpanContext(
        trace_id=int(found.group(1), 16),
        span_id=int(found.group(2), 16),
        is_remote=True,
        trace_flags=TraceFlags(int(found.group(3), 16)),
    )
    return _trace.set_span_in_context(NonRecordingSpan(span_context))


def _payload(value: Any) -> str:
    text = json.dumps(value, default=repr, ensure_ascii=False)
    return text if len(text) <= _PAYLOAD_LIMIT else text[:_PAYLOAD_LIMIT] + "…"


class SagaTrace:
    """One saga's spans: made by the engine, for a saga whose process has a tracer."""

    def __init__(self, tracer: Any, saga_id: str, saga_name: str) -> None:
        self.tracer = tracer
        self.attributes: dict[str, Any] = {
            "undo_core.saga.id": saga_id,
            "undo_core.saga.name": saga_name,
        }
        self.payloads = os.environ.get("UNDO_CORE_TRACE_PAYLOADS") == "1"
        self.span: Any = None
        self.parent: Any = None
        self.began = False

    def _begin(self) -> None:
        """The saga's span, at its first step, under the caller's current span.

        Not when the saga object is made: a saga restored in a worker to run its undos
        makes no forward step, so it adds no second saga span (its undo spans go under
        the steps' own, from their traceparent).
        """
        self.began = True
        self.span = self.tracer.start_span(
            f"saga {self.attributes['undo_core.saga.name']}", attributes=self.attributes
        )
        self.parent = _trace.set_span_in_context(self.span)

    def on_event(self, event: Any) -> None:
        """A listener: the saga's span ends with the saga (completed, failed, rolled back)."""
        if self.span is not None and event.kind == "saga" and event.to_state in _ENDS:
            self.span.set_attribute("undo_core.saga.status", event.to_state)
            if event.to_state in ("FAILED", "ROLLBACK_FAILED"):
                self.span.set_status(Status(StatusCode.ERROR, event.to_state))
            self.span.end()
            self.span = None

    def step(self, tool: str, step_id: str | None, metadata: Mapping[str, Any], input: Any) -> Any:
        """Start a step's forward span (ended by ``finish``)."""
        if not self.began:
            self._begin()
        attributes = {
            **self.attributes,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
        }
        if step_id is not None:
            attributes["undo_core.step.id"] = step_id
        call_id = metadata.get("tool_call_id")
        if isinstance(call_id, str):
            attributes["gen_ai.tool.call.id"] = call_id
        if self.payloads:
            attributes["undo_core.step.input"] = _payload(input)
        return self.tracer.start_span(
            f"execute_tool {tool}", context=self.parent, attributes=attributes
        )

    def undo(self, tool: str, step_id: str, metadata: Mapping[str, Any], attempt: int) -> Any:
        """Start an undo attempt's span, under the step's forward span wherever it ran."""
        parent = _remote_parent(metadata.get(METADATA_KEY)) or self.parent
        attributes = {
            **self.attributes,
            "gen_ai.operation.name": "undo_tool",
            "gen_ai.tool.name": tool,
            "undo_core.step.id": step_id,
            "undo_core.undo.attempt": attempt,
        }
        return self.tracer.start_span(f"undo_tool {tool}", context=parent, attributes=attributes)

    def finish(self, span: Any, error: BaseException | None, output: Any = None) -> None:
        """End a step's or an attempt's span, with its error recorded if it failed."""
        if error is not None:
            span.record_exception(error)
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(Status(StatusCode.ERROR, str(error)[:500]))
        elif self.payloads and output is not None:
            span.set_attribute("undo_core.step.output", _payload(output))
        span.end()

    @staticmethod
    def traceparent(span: Any) -> str | None:
        return _traceparent(span)


def current_traceparent() -> str | None:
    """The W3C traceparent of the caller's current span, if it is a real (sampled or not) one."""
    if _trace is None:
        return None
    return _traceparent(_trace.get_current_span())


def saga_trace(saga_id: str, saga_name: str) -> SagaTrace | None:
    """A ``SagaTrace`` when a tracer provider is set, else None (no spans, no cost)."""
    if _trace is None:
        return None
    provider = _trace.get_tracer_provider()
    if isinstance(provider, _trace.ProxyTracerProvider | _trace.NoOpTracerProvider):
        return None  # nothing set up: the API's no-op default
    return SagaTrace(provider.get_tracer("undo_core"), saga_id, saga_name)


@contextmanager
def current(span: Any) -> Iterator[None]:
    """Run a call with ``span`` current (its own spans become children), if there is one."""
    if span is None or _trace is None:
        with nullcontext():
            yield
        return
    with _trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    ):
        yield

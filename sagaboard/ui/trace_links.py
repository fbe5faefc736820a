"""'Open trace' links: a step's OpenTelemetry span, in the tracing tool the site names.

The agent's SDK sends each step's W3C traceparent (``undo_core.tracing``); sagaboard keeps
it in the step's metadata. ``SAGABOARD_TRACE_URL`` (checked at start) turns it into a link.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.conf import settings

from undo_core import tracing


def step_trace_url(metadata: Any) -> str | None:
    """The link to a step's span, or None (no traceparent, or no SAGABOARD_TRACE_URL)."""
    template: str = settings.SAGABOARD_TRACE_URL
    if not template or not isinstance(metadata, Mapping):
        return None
    found = tracing.parse_traceparent(metadata.get(tracing.METADATA_KEY))
    if found is None:
        return None
    trace_id, span_id = found
    return template.format(trace_id=trace_id, span_id=span_id)


def saga_trace_url(steps: Iterable[Any]) -> str | None:
    """The saga's trace: its first traced step's (a saga's steps share the agent's trace)."""
    for step in steps:
        url = step_trace_url(step.metadata)
        if url is not None:
            return url
    return None

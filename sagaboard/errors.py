"""The one error a service raises when it refuses a request, and what it becomes over HTTP.

A service (ingestion, the manual flow, decisions, approvals, operators' actions)
says *why* it refuses: a stable ``code``, a ``message`` for a person, the ``field``
at fault and the HTTP ``status`` that fits. The API answers every one the same way
(``sagaboard.api.errors``: ``{"error": body()}`` with its status and ``headers``), and
the pages show its ``message`` with its ``status``; neither keeps its own table.

Subclasses name where a refusal comes from, and keep their callers' signatures:
``ingest.IngestError`` (an event of a batch: ``index``, ``event_id``),
``limits.InputRefused`` (a value in a batch), ``approvals.DecisionRefused`` (a
person's decision or action), ``rate_limits.RateLimited`` (too many failures).
"""

from __future__ import annotations

from typing import Any

RETRY_SOON = 1
"""Seconds a client waits before retrying a 503 (the database was busy or a race lost)."""


class ServiceError(Exception):
    """A refused request: ``status`` and ``code`` become the HTTP answer, ``field`` names the
    input at fault; ``index`` and ``event_id`` the event of a batch, when there is one."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        *,
        index: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field
        self.index = index
        self.event_id: str | None = None
        self.headers = dict(headers or {})
        if status == 503:  # nothing was applied: the same request may succeed in a moment
            self.headers.setdefault("Retry-After", str(RETRY_SOON))

    def body(self) -> dict[str, Any]:
        """The ``error`` object of docs/api.md: code and message, then what is known of
        where (field, index, event_id)."""
        where = {"field": self.field, "index": self.index, "event_id": self.event_id}
        return {
            "code": self.code,
            "message": self.message,
            **{k: v for k, v in where.items() if v is not None},
        }

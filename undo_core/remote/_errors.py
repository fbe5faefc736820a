"""Errors of the sagaboard SDK.

Both subclass :class:`~undo_core.StoreError`: code that already handles a
store that cannot read or write (the engine, ``recover()``) handles these too::

    StoreError
    ├── SagaboardAPIError      the server answered with an error (JSON error shape)
    └── SagaboardUnavailable   no answer: connection refused, DNS, timeout
"""

from __future__ import annotations

from typing import Any

import httpx

from ..vocabulary.errors import StoreError

__all__ = ["SagaboardAPIError", "SagaboardUnavailable", "api_error"]


class SagaboardAPIError(StoreError):
    """The server refused a request; ``status`` says who must act (see docs/api.md).

    ``code`` is the machine-readable reason (``validation_error``,
    ``illegal_transition``...), ``field`` the offending field and ``index`` the
    first bad event of a batch, when the server names them; ``response`` is the
    server's answer itself.
    """

    response: httpx.Response | None = None

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        index: int | None = None,
        event_id: str | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.index = index
        self.event_id = event_id
        where = f" (field {field})" if field else ""
        super().__init__(f"sagaboard answered {status} {code}: {message}{where}")


class SagaboardUnavailable(StoreError):
    """sagaboard could not be reached (connection error or timeout); retrying may help."""


def api_error(response: httpx.Response) -> SagaboardAPIError:
    """Parse the ``{"error": {...}}`` shape; a body that is not it still gives a useful error."""
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        text = response.text[:200] if response.content else response.reason_phrase
        bare = SagaboardAPIError(response.status_code, f"http_{response.status_code}", text)
        bare.response = response
        return bare
    index = error.get("index")
    parsed = SagaboardAPIError(
        response.status_code,
        str(error.get("code") or f"http_{response.status_code}"),
        str(error.get("message") or ""),
        field=error.get("field"),
        index=index if isinstance(index, int) else None,
        event_id=error.get("event_id"),
    )
    parsed.response = response
    return parsed

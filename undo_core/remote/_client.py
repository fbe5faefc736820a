"""``SagaboardClient`` / ``AsyncSagaboardClient``: the sagaboard API, call by call.

For code that drives a saga by hand over the API (the seed's MCP tools:
begin, add step, complete, fail, rollback, status, list steps), for reading
sagas back, and for the decisions an agent waits for (approvals, operators'
retry / resolve / leave: what :class:`~undo_core.remote.SagaboardGate` calls).
Each method builds one :class:`_Call` (method, path, query, body) with plain
functions shared by both clients, so the sync and async clients differ only in
how they send it.

Every write carries a fresh ``event_id`` (uuid4), made once per method call and
reused by that call's own retries: the server answers a repeated id with the
original result (``"status": "duplicate"``) instead of applying it twice. The
decision calls need none: asking for an approval is get-or-create, and an
acknowledgement is conditional (a repeat is a 409 that changes nothing).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, NamedTuple, Self
from urllib.parse import quote

import httpx

from .. import tracing
from ._errors import SagaboardUnavailable, api_error

__all__ = ["MAX_WAIT", "AsyncSagaboardClient", "SagaboardClient", "retry_after"]

_API = "/api/v1"
_MAX_PAGES = 10_000
"""A server that keeps answering a next_cursor cannot keep a caller looping forever."""
_MAX_DELAY = 30.0
MAX_WAIT = 30.0
"""The longest the server holds a long-poll (``wait``), in seconds."""


class _Call(NamedTuple):
    method: str
    path: str
    params: httpx.QueryParams | None = None
    body: dict[str, Any] | None = None
    wait: float = 0.0
    """A long-poll: the server may hold the answer this many seconds (added to the timeout)."""


def _timeout(base: httpx.Timeout, wait: float) -> httpx.Timeout:
    """The client's timeout, with a long-poll's ``wait`` added to the read timeout."""
    if wait <= 0 or base.read is None:
        return base
    return httpx.Timeout(
        connect=base.connect, read=base.read + wait, write=base.write, pool=base.pool
    )


def _wait(wait: float) -> float:
    if not 0 <= wait <= MAX_WAIT:
        raise ValueError(f"wait must be 0..{MAX_WAIT:g} seconds, got {wait!r}")
    return float(wait)


def _saga_path(saga_id: str, *rest: str) -> str:
    parts = [quote(saga_id, safe=""), *(quote(p, safe="") for p in rest)]
    return f"{_API}/sagas/" + "/".join(parts)


def _event_id() -> str:
    return str(uuid.uuid4())


def _query(filters: Mapping[str, Any], cursor: str | None) -> httpx.QueryParams:
    """Filters as query pairs: a list repeats the key (``status``), a datetime is ISO 8601."""
    pairs: list[tuple[str, str | int | float | bool | None]] = []
    for key, value in filters.items():
        values = value if isinstance(value, list | tuple | set | frozenset) else [value]
        for v in values:
            if v is not None:
                pairs.append((key, v.isoformat() if isinstance(v, datetime) else str(v)))
    if cursor:
        pairs.append(("cursor", cursor))
    return httpx.QueryParams(pairs)


def retry_after(response: httpx.Response | None, cap: float = _MAX_DELAY) -> float:
    """The answer's ``Retry-After`` in seconds (0 if absent, or an HTTP date: use backoff)."""
    value = response.headers.get("Retry-After") if response is not None else None
    try:
        seconds = float(value) if value else 0.0
    except ValueError:
        return 0.0
    return min(max(seconds, 0.0), cap)


def _delay(attempt: int, response: httpx.Response | None = None) -> float:
    backoff = min(_MAX_DELAY, 0.2 * 2.0 ** min(attempt, 10)) * random.uniform(0.5, 1.0)
    return max(backoff, retry_after(response))


def _retryable(response: httpx.Response) -> bool:
    return response.status_code in (408, 429) or response.status_code >= 500


def _result(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise api_error(response)
    return response.json() if response.content else None


def _unavailable(url: str, err: Exception) -> SagaboardUnavailable:
    return SagaboardUnavailable(f"cannot reach sagaboard at {url}: {err!r}")


class _Calls:
    """The request of each API operation; shared by the sync and async clients."""

    @staticmethod
    def send_events(events: Iterable[Mapping[str, Any]]) -> _Call:
        return _Call("POST", f"{_API}/events", body={"events": [dict(e) for e in events]})

    @staticmethod
    def get_saga(saga_id: str) -> _Call:
        return _Call("GET", _saga_path(saga_id))

    @staticmethod
    def list_sagas(filters: Mapping[str, Any], cursor: str | None) -> _Call:
        return _Call("GET", f"{_API}/sagas", params=_query(filters, cursor))

    @staticmethod
    def begin(
        name: str, saga_id: str | None, options: Mapping[str, Any] | None, actor: str | None
    ) -> _Call:
        body: dict[str, Any] = {"event_id": _event_id(), "name": name, **(options or {})}
        if saga_id is not None:
            body["id"] = saga_id
        if actor is not None:
            body["actor"] = actor
        return _Call("POST", f"{_API}/sagas", body=body)

    @staticmethod
    def add_step(
        saga_id: str,
        tool_name: str,
        input: Any,
        undo: str | Mapping[str, Any] | None,
        requires_approval: bool,
        reversibility: str,
    ) -> _Call:
        body: dict[str, Any] = {
            "event_id": _event_id(),
            "tool_name": tool_name,
            "input": input,
            "requires_approval": requires_approval,
            "reversibility": reversibility,
        }
        if undo is not None:
            body["undo"] = _undo(undo)
        traceparent = tracing.current_traceparent()
        if traceparent is not None:  # the agent's span for this step: its undo joins it
            body["traceparent"] = traceparent
        return _Call("POST", _saga_path(saga_id, "steps"), body=body)

    @staticmethod
    def complete_step(saga_id: str, step_id: str, output: Any) -> _Call:
        body = {"event_id": _event_id(), "output": output}
        return _Call("POST", _saga_path(saga_id, "steps", step_id, "complete"), body=body)

    @staticmethod
    def fail_step(saga_id: str, step_id: str, error: BaseException | str) -> _Call:
        body = {"event_id": _event_id(), "error": str(error) or type(error).__name__}
        return _Call("POST", _saga_path(saga_id, "steps", step_id, "fail"), body=body)

    @staticmethod
    def complete(saga_id: str, actor: str | None) -> _Call:
        body = {"event_id": _event_id(), "actor": actor}
        return _Call("POST", _saga_path(saga_id, "complete"), body=body)

    @staticmethod
    def rollback(saga_id: str, reason: str | None, actor: str | None) -> _Call:
        body = {"event_id": _event_id(), "reason": reason, "actor": actor}
        return _Call("POST", _saga_path(saga_id, "rollback"), body=body)

    @staticmethod
    def list_events(saga_id: str, after: int | None, limit: int | None) -> _Call:
        query = {"after": after, "limit": limit}
        return _Call("GET", _saga_path(saga_id, "events"), params=_query(query, None))

    @staticmethod
    def request_approval(saga_id: str, step_id: str, why: str | None) -> _Call:
        body = {"why": why} if why else {}
        return _Call("POST", _saga_path(saga_id, "steps", step_id, "approval"), body=body)

    @staticmethod
    def approval_rule(saga_id: str, step_id: str) -> _Call:
        return _Call("GET", _saga_path(saga_id, "steps", step_id, "approval-rule"))

    @staticmethod
    def get_approval(approval_id: int, wait: float) -> _Call:
        wait = _wait(wait)
        params = httpx.QueryParams({"wait": f"{wait:g}"}) if wait else None
        return _Call("GET", f"{_API}/approvals/{int(approval_id)}", params=params, wait=wait)

    @staticmethod
    def get_decision(saga_id: str, step_id: str, wait: float) -> _Call:
        wait = _wait(wait)
        params = httpx.QueryParams({"wait": f"{wait:g}"}) if wait else None
        path = _saga_path(saga_id, "steps", step_id, "decision")
        return _Call("GET", path, params=params, wait=wait)

    @staticmethod
    def ack_decision(saga_id: str, step_id: str, action: str, at: str | None) -> _Call:
        body: dict[str, Any] = {"action": action}
        if at is not None:
            body["at"] = at
        return _Call("POST", _saga_path(saga_id, "steps", step_id, "decision", "ack"), body=body)


def _undo(undo: str | Mapping[str, Any]) -> dict[str, Any]:
    """A string is a shell command (the seed's ``undoCommand``); a mapping is sent as given."""
    if isinstance(undo, str):
        return {"kind": "command", "command": undo}
    return dict(undo)


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json"}


class SagaboardClient:
    """Synchronous client of the sagaboard API (``httpx.Client``).

    Connection errors, timeouts, 408, 429 (honouring ``Retry-After``) and 5xx are
    retried ``retries`` times with backoff; then a connection problem raises
    :class:`SagaboardUnavailable` and an error answer :class:`SagaboardAPIError`.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        retries: int = 2,
    ) -> None:
        self.url = url.rstrip("/")
        self._retries = max(0, retries)
        self._http = httpx.Client(
            base_url=self.url, headers=_headers(token), timeout=timeout, transport=transport
        )

    def _send(self, call: _Call) -> Any:
        for attempt in range(self._retries + 1):
            last = attempt == self._retries
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    params=call.params,
                    json=call.body,
                    timeout=_timeout(self._http.timeout, call.wait),
                )
            except httpx.TransportError as err:
                if last:
                    raise _unavailable(self.url, err) from err
                time.sleep(_delay(attempt))
                continue
            if _retryable(response) and not last:
                time.sleep(_delay(attempt, response))
                continue
            return _result(response)
        raise AssertionError("unreachable")  # pragma: no cover

    def send_events(self, events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Post transition events (docs/api.md); one result per event, in order."""
        results: list[dict[str, Any]] = self._send(_Calls.send_events(events))["results"]
        return results

    def get_saga(self, saga_id: str) -> dict[str, Any]:
        """The saga with its steps; :class:`SagaboardAPIError` 404 if not in your project."""
        saga: dict[str, Any] = self._send(_Calls.get_saga(saga_id))
        return saga

    def list_sagas(self, **filters: Any) -> Iterator[dict[str, Any]]:
        """Sagas newest first, following ``next_cursor``; a list value repeats the filter."""
        cursor: str | None = None
        seen: set[str] = set()
        for _page in range(_MAX_PAGES):
            page = self._send(_Calls.list_sagas(filters, cursor))
            yield from page["items"]
            cursor = page.get("next_cursor")
            if not cursor or cursor in seen:
                return
            seen.add(cursor)

    def begin(
        self,
        name: str,
        *,
        saga_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Start a saga that sagaboard drives (MCP ``saga_begin``).

        ``options`` are the saga's options the server accepts, sent as fields of
        the request (today ``{"on_compensation_failure": "halt" | "continue"}``).
        """
        saga: dict[str, Any] = self._send(_Calls.begin(name, saga_id, options, actor))
        return saga

    def add_step(
        self,
        saga_id: str,
        tool_name: str,
        input: Any,
        *,
        undo: str | Mapping[str, Any] | None = None,
        requires_approval: bool = False,
        reversibility: str = "reversible",
    ) -> dict[str, Any]:
        """Register a step (PENDING) with how to undo it (MCP ``saga_add_step``).

        With OpenTelemetry on, the current span's W3C ``traceparent`` goes with it:
        sagaboard shows "open trace" for the step, and its worker's undo spans join
        this trace.

        ``undo``: a string is a shell command (``{"kind": "command", ...}``, which
        the server always puts behind an approval); a mapping is sent as the
        ``undo`` object; ``None`` leaves the server's default (``none``: nothing to undo).
        """
        call = _Calls.add_step(saga_id, tool_name, input, undo, requires_approval, reversibility)
        step: dict[str, Any] = self._send(call)
        return step

    def complete_step(self, saga_id: str, step_id: str, output: Any = None) -> dict[str, Any]:
        """The step ran: record its output (MCP ``saga_complete_step``)."""
        step: dict[str, Any] = self._send(_Calls.complete_step(saga_id, step_id, output))
        return step

    def fail_step(self, saga_id: str, step_id: str, error: BaseException | str) -> dict[str, Any]:
        """The step failed (MCP ``saga_fail_step``); the saga stays open until rollback."""
        step: dict[str, Any] = self._send(_Calls.fail_step(saga_id, step_id, error))
        return step

    def complete(self, saga_id: str, *, actor: str | None = None) -> dict[str, Any]:
        """Finish the saga successfully: nothing will be undone."""
        saga: dict[str, Any] = self._send(_Calls.complete(saga_id, actor))
        return saga

    def rollback(
        self, saga_id: str, reason: str | None = None, *, actor: str | None = None
    ) -> dict[str, Any]:
        """Ask the server to undo every completed step, newest first (MCP ``saga_rollback``).

        The answer (202) is the saga COMPENSATING: the undos run in sagaboard's workers.
        """
        saga: dict[str, Any] = self._send(_Calls.rollback(saga_id, reason, actor))
        return saga

    def list_events(self, saga_id: str, *, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """The saga's event log, oldest first, following ``next_after``."""
        after: int | None = None
        for _page in range(_MAX_PAGES):
            page = self._send(_Calls.list_events(saga_id, after, limit))
            yield from page["items"]
            if page.get("next_after") in (None, after):
                return
            after = page["next_after"]

    def status(self, saga_id: str) -> dict[str, Any]:
        """The saga's status with its steps (MCP ``saga_status``)."""
        return self.get_saga(saga_id)

    def list_steps(self, saga_id: str) -> list[dict[str, Any]]:
        """Every step in full, oldest first (MCP ``saga_list_steps``)."""
        steps: list[dict[str, Any]] = self.get_saga(saga_id).get("steps", [])
        return steps

    # ------------------------------------------------------------ decisions (SagaboardGate)

    def request_approval(
        self, saga_id: str, step_id: str, *, why: str | None = None
    ) -> dict[str, Any]:
        """The approval for a mirrored step's undo: the current one, or a new PENDING one.

        ``{"id", "status", "required", "why", "decided_reason", "decided_by": [names],
        "plan_hash", "created_at", "expires_at", ...}``; the step must have reached
        the server (flush the store first), else :class:`SagaboardAPIError` 404.
        """
        approval: dict[str, Any] = self._send(_Calls.request_approval(saga_id, step_id, why))
        return approval

    def approval_rule(self, saga_id: str, step_id: str) -> dict[str, Any]:
        """Whether the server's policies want a person for this undo: ``{"needed", "why"}``."""
        rule: dict[str, Any] = self._send(_Calls.approval_rule(saga_id, step_id))
        return rule

    def get_approval(self, approval_id: int, *, wait: float = 0.0) -> dict[str, Any]:
        """The approval; while PENDING the server holds the answer up to ``wait`` s (0..30)."""
        approval: dict[str, Any] = self._send(_Calls.get_approval(approval_id, wait))
        return approval

    def get_decision(self, saga_id: str, step_id: str, *, wait: float = 0.0) -> dict[str, Any]:
        """An operator's answer to a failed undo: ``{"action": "retry" | "resolve" | "leave" |
        None, "by", "reason", "at", "state"}``, held up to ``wait`` s (0..30) while None."""
        decision: dict[str, Any] = self._send(_Calls.get_decision(saga_id, step_id, wait))
        return decision

    def ack_decision(
        self, saga_id: str, step_id: str, action: str, *, at: str | None = None
    ) -> dict[str, Any]:
        """Say the pending ``action`` (retry or resolve, requested ``at``) was carried out.

        Post its transition events first. :class:`SagaboardAPIError` 409 if that
        request is no longer pending (acknowledged already, or replaced).
        """
        answer: dict[str, Any] = self._send(_Calls.ack_decision(saga_id, step_id, action, at))
        return answer

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncSagaboardClient:
    """The same API for asyncio (``httpx.AsyncClient``); see :class:`SagaboardClient`."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        retries: int = 2,
    ) -> None:
        self.url = url.rstrip("/")
        self._retries = max(0, retries)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=_headers(token), timeout=timeout, transport=transport
        )

    async def _send(self, call: _Call) -> Any:
        for attempt in range(self._retries + 1):
            last = attempt == self._retries
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    params=call.params,
                    json=call.body,
                    timeout=_timeout(self._http.timeout, call.wait),
                )
            except httpx.TransportError as err:
                if last:
                    raise _unavailable(self.url, err) from err
                await asyncio.sleep(_delay(attempt))
                continue
            if _retryable(response) and not last:
                await asyncio.sleep(_delay(attempt, response))
                continue
            return _result(response)
        raise AssertionError("unreachable")  # pragma: no cover

    async def send_events(self, events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Post transition events (docs/api.md); one result per event, in order."""
        results: list[dict[str, Any]] = (await self._send(_Calls.send_events(events)))["results"]
        return results

    async def get_saga(self, saga_id: str) -> dict[str, Any]:
        """The saga with its steps; :class:`SagaboardAPIError` 404 if not in your project."""
        saga: dict[str, Any] = await self._send(_Calls.get_saga(saga_id))
        return saga

    async def list_sagas(self, **filters: Any) -> AsyncIterator[dict[str, Any]]:
        """Sagas newest first, following ``next_cursor``; a list value repeats the filter."""
        cursor: str | None = None
        seen: set[str] = set()
        for _page in range(_MAX_PAGES):
            page = await self._send(_Calls.list_sagas(filters, cursor))
            for item in page["items"]:
                yield item
            cursor = page.get("next_cursor")
            if not cursor or cursor in seen:
                return
            seen.add(cursor)

    async def begin(
        self,
        name: str,
        *,
        saga_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Start a saga that sagaboard drives (MCP ``saga_begin``); see the sync client."""
        saga: dict[str, Any] = await self._send(_Calls.begin(name, saga_id, options, actor))
        return saga

    async def add_step(
        self,
        saga_id: str,
        tool_name: str,
        input: Any,
        *,
        undo: str | Mapping[str, Any] | None = None,
        requires_approval: bool = False,
        reversibility: str = "reversible",
    ) -> dict[str, Any]:
        """Register a step (PENDING) with how to undo it (MCP ``saga_add_step``).

        With OpenTelemetry on, the current span's W3C ``traceparent`` goes with it:
        sagaboard shows "open trace" for the step, and its worker's undo spans join
        this trace.

        ``undo``: a string is a shell command (``{"kind": "command", ...}``, which
        the server always puts behind an approval); a mapping is sent as the
        ``undo`` object; ``None`` leaves the server's default (``none``: nothing to undo).
        """
        call = _Calls.add_step(saga_id, tool_name, input, undo, requires_approval, reversibility)
        step: dict[str, Any] = await self._send(call)
        return step

    async def complete_step(self, saga_id: str, step_id: str, output: Any = None) -> dict[str, Any]:
        """The step ran: record its output (MCP ``saga_complete_step``)."""
        step: dict[str, Any] = await self._send(_Calls.complete_step(saga_id, step_id, output))
        return step

    async def fail_step(
        self, saga_id: str, step_id: str, error: BaseException | str
    ) -> dict[str, Any]:
        """The step failed (MCP ``saga_fail_step``); the saga stays open until rollback."""
        step: dict[str, Any] = await self._send(_Calls.fail_step(saga_id, step_id, error))
        return step

    async def complete(self, saga_id: str, *, actor: str | None = None) -> dict[str, Any]:
        """Finish the saga successfully: nothing will be undone."""
        saga: dict[str, Any] = await self._send(_Calls.complete(saga_id, actor))
        return saga

    async def rollback(
        self, saga_id: str, reason: str | None = None, *, actor: str | None = None
    ) -> dict[str, Any]:
        """Ask the server to undo every completed step, newest first (MCP ``saga_rollback``)."""
        saga: dict[str, Any] = await self._send(_Calls.rollback(saga_id, reason, actor))
        return saga

    async def list_events(
        self, saga_id: str, *, limit: int | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The saga's event log, oldest first, following ``next_after``."""
        after: int | None = None
        for _page in range(_MAX_PAGES):
            page = await self._send(_Calls.list_events(saga_id, after, limit))
            for item in page["items"]:
                yield item
            if page.get("next_after") in (None, after):
                return
            after = page["next_after"]

    async def status(self, saga_id: str) -> dict[str, Any]:
        """The saga's status with its steps (MCP ``saga_status``)."""
        return await self.get_saga(saga_id)

    async def list_steps(self, saga_id: str) -> list[dict[str, Any]]:
        """Every step in full, oldest first (MCP ``saga_list_steps``)."""
        steps: list[dict[str, Any]] = (await self.get_saga(saga_id)).get("steps", [])
        return steps

    # ------------------------------------------------------------ decisions (AsyncSagaboardGate)

    async def approval_rule(self, saga_id: str, step_id: str) -> dict[str, Any]:
        """See :meth:`SagaboardClient.approval_rule`."""
        rule: dict[str, Any] = await self._send(_Calls.approval_rule(saga_id, step_id))
        return rule

    async def request_approval(
        self, saga_id: str, step_id: str, *, why: str | None = None
    ) -> dict[str, Any]:
        """The approval for a mirrored step's undo; see :meth:`SagaboardClient.request_approval`."""
        approval: dict[str, Any] = await self._send(_Calls.request_approval(saga_id, step_id, why))
        return approval

    async def get_approval(self, approval_id: int, *, wait: float = 0.0) -> dict[str, Any]:
        """The approval; while PENDING the server holds the answer up to ``wait`` s (0..30)."""
        approval: dict[str, Any] = await self._send(_Calls.get_approval(approval_id, wait))
        return approval

    async def get_decision(
        self, saga_id: str, step_id: str, *, wait: float = 0.0
    ) -> dict[str, Any]:
        """An operator's answer to a failed undo; see :meth:`SagaboardClient.get_decision`."""
        decision: dict[str, Any] = await self._send(_Calls.get_decision(saga_id, step_id, wait))
        return decision

    async def ack_decision(
        self, saga_id: str, step_id: str, action: str, *, at: str | None = None
    ) -> dict[str, Any]:
        """Say the pending ``action`` was carried out; see :meth:`SagaboardClient.ack_decision`."""
        answer: dict[str, Any] = await self._send(_Calls.ack_decision(saga_id, step_id, action, at))
        return answer

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

"""A fake sagaboard for the SDK tests: the docs/api.md contract on ``httpx.MockTransport``.

It keeps the events it applied (in order), answers a repeated ``event_id`` with
``duplicate``, refuses an event older than its saga's last one (so a reordering
SDK fails the tests), and rebuilds each saga from its events for the read
endpoints. Switches: ``mode`` ("up", "down": raise ``httpx.ConnectError``,
"slow": sleep ``delay`` then answer), ``fail_next(kind, n)`` ("500", "429",
"down") for the next requests, ``reject`` (event ids answered 409).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from undo_core.remote import SagaboardStore

URL = "https://sagaboard.test"
TOKEN = "sgb_ab12cd34_secret"


@dataclass
class Seen:
    """One request the fake received, and what it answered."""

    method: str
    path: str
    query: list[tuple[str, str]]
    body: Any
    headers: httpx.Headers
    at: float
    raw_path: str = ""
    status: int = 0


def _error(status: int, code: str, message: str, **extra: Any) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message, **extra}})


@dataclass
class FakeSagaboard:
    mode: str = "up"
    delay: float = 0.0
    retry_after: str = "0.3"
    page_size: int = 50
    reject: set[str] = field(default_factory=set)
    reject_with_index: bool = True
    next_error: tuple[int, Any] | None = None
    requests: list[Seen] = field(default_factory=list)
    applied: list[dict[str, Any]] = field(default_factory=list)
    duplicates: int = 0
    sagas: dict[str, dict[str, Any]] = field(default_factory=dict)
    steps: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    rollback_requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Operators' rollback requests by saga id, as sagaboard answers them (``saga_stop``)."""
    _failures: deque[str] = field(default_factory=deque)
    _by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------ test controls

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def fail_next(self, kind: str, times: int = 1) -> None:
        self._failures.extend([kind] * times)

    def applied_ids(self) -> list[str]:
        with self._lock:
            return [e["event_id"] for e in self.applied]

    def event_posts(self, status: int | None = None) -> list[Seen]:
        with self._lock:
            return [
                r
                for r in self.requests
                if r.path == "/api/v1/events" and (status is None or r.status == status)
            ]

    # ------------------------------------------------------------ the server

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        seen = Seen(
            request.method,
            request.url.path,
            list(request.url.params.multi_items()),
            body,
            request.headers,
            time.monotonic(),
            request.url.raw_path.decode(),
        )
        with self._lock:
            self.requests.append(seen)
            failure = self._failures.popleft() if self._failures else None
            mode = self.mode
        if failure == "down" or mode == "down":
            raise httpx.ConnectError("connection refused", request=request)
        if mode == "slow":
            time.sleep(self.delay)
        response = self._answer(request, seen, failure)
        seen.status = response.status_code
        return response

    def _answer(self, request: httpx.Request, seen: Seen, failure: str | None) -> httpx.Response:
        if failure == "500":
            return httpx.Response(500, text="Internal Server Error")
        if failure == "429":
            return httpx.Response(429, headers={"Retry-After": self.retry_after})
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _error(401, "unauthorized", "no token, unknown token or revoked token")
        if self.next_error is not None:
            (status, payload), self.next_error = self.next_error, None
            return httpx.Response(status, json=payload)
        with self._lock:
            return self._route(request.method, seen.path, seen)

    def _route(self, method: str, path: str, seen: Seen) -> httpx.Response:
        parts = path.removeprefix("/api/v1/").split("/")
        if method == "POST" and parts == ["events"]:
            return self._events(seen.body["events"])
        if method == "GET" and parts == ["rollback-requests"]:
            asked = [{"saga_id": sid, **r} for sid, r in self.rollback_requests.items()]
            return httpx.Response(200, json={"rollback_requested": asked})
        if method == "GET" and parts == ["sagas"]:
            return self._list(seen.query)
        if method == "GET" and len(parts) == 2 and parts[0] == "sagas":
            return self._get(parts[1])
        if method == "GET" and len(parts) == 3 and parts[2] == "events":
            return self._log(parts[1], dict(seen.query))
        if method == "POST" and parts[0] == "sagas":
            return self._manual(parts[1:], seen.body)
        return _error(404, "not_found", f"no route {method} {path}")

    def _events(self, events: list[dict[str, Any]]) -> httpx.Response:
        results = []
        fresh: dict[str, dict[str, Any]] = {}
        for index, event in enumerate(events):
            eid = event["event_id"]
            refusal = self._refusal(event, index, fresh)
            if refusal is not None:
                return refusal
            known = self._by_id.get(eid) or fresh.get(eid)
            if known is not None:
                results.append({"event_id": eid, "status": "duplicate", "log_id": known["_log"]})
                continue
            fresh[eid] = {**event, "_log": len(self.applied) + len(fresh) + 1}
            results.append({"event_id": eid, "status": "applied", "log_id": fresh[eid]["_log"]})
        for event in fresh.values():  # all or nothing: only now is anything applied
            self._apply(event)
        self.duplicates += sum(r["status"] == "duplicate" for r in results)
        answer: dict[str, Any] = {"results": results}
        asked = [
            {"saga_id": sid, **r}
            for sid, r in self.rollback_requests.items()
            if sid in {e["saga"]["id"] for e in events}
        ]
        if asked:
            answer["rollback_requested"] = asked
        return httpx.Response(200, json=answer)

    def _refusal(
        self, event: dict[str, Any], index: int, fresh: dict[str, dict[str, Any]]
    ) -> httpx.Response | None:
        eid = event["event_id"]
        where: dict[str, Any] = {"index": index, "event_id": eid}
        if eid in self.reject:
            if not self.reject_with_index:
                where = {}
            return _error(409, "illegal_transition", f"event {eid} is refused", **where)
        if eid in self._by_id or eid in fresh:
            return None
        saga = event["saga"]
        last = max(
            [self.sagas.get(saga["id"], {}).get("seq", 0)]
            + [e["saga"]["seq"] for e in fresh.values() if e["saga"]["id"] == saga["id"]]
        )
        if saga["seq"] <= last:
            return _error(409, "stale_event", f"{eid} is older than seq {last}", **where)
        return None

    def _apply(self, event: dict[str, Any]) -> None:
        self._by_id[event["event_id"]] = event
        self.applied.append({k: v for k, v in event.items() if k != "_log"})
        saga = event["saga"]
        self.sagas[saga["id"]] = saga
        steps = self.steps.setdefault(saga["id"], {})
        if event["step"] is not None:
            steps[event["step"]["id"]] = event["step"]

    def _get(self, saga_id: str) -> httpx.Response:
        if saga_id not in self.sagas:
            return _error(404, "not_found", f"no saga {saga_id}")
        steps = sorted(self.steps[saga_id].values(), key=lambda s: s["position"])
        return httpx.Response(200, json={**self.sagas[saga_id], "steps": steps})

    def _list(self, query: list[tuple[str, str]]) -> httpx.Response:
        statuses = {v for k, v in query if k == "status"}
        cursor = int(dict(query).get("cursor", "0"))
        rows = sorted(self.sagas.values(), key=lambda s: s["created_at"], reverse=True)
        rows = [s for s in rows if not statuses or s["status"] in statuses]
        page = rows[cursor : cursor + self.page_size]
        more = cursor + self.page_size < len(rows)
        return httpx.Response(
            200, json={"items": page, "next_cursor": str(cursor + self.page_size) if more else None}
        )

    def _log(self, saga_id: str, query: dict[str, str]) -> httpx.Response:
        after, limit = int(query.get("after", "0")), int(query.get("limit", "500"))
        rows = [
            {"log_id": n, "event_id": e["event_id"], **e["event"]}
            for n, e in enumerate(self.applied, start=1)
            if e["saga"]["id"] == saga_id and n > after
        ][:limit]
        next_after = rows[-1]["log_id"] if len(rows) == limit else None
        return httpx.Response(200, json={"items": rows, "next_after": next_after})

    def _manual(self, parts: list[str], body: dict[str, Any]) -> httpx.Response:
        """The manual-flow endpoints: echo what was asked, in a plausible shape."""
        if not parts:
            saga_id = body.get("id") or str(uuid.uuid4())
            return httpx.Response(
                201, json={"id": saga_id, "name": body["name"], "status": "IN_PROGRESS"}
            )
        if parts[1:] == ["steps"]:
            return httpx.Response(
                201, json={"id": "step-1", "tool_name": body["tool_name"], "state": "PENDING"}
            )
        if len(parts) == 2:
            status = {"rollback": (202, "COMPENSATING"), "complete": (200, "COMPLETED")}
            code, state = status[parts[1]]
            return httpx.Response(code, json={"id": parts[0], "status": state})
        state = {"complete": "COMPLETED", "fail": "FAILED"}[parts[-1]]
        return httpx.Response(200, json={"id": parts[2], "state": state})


@pytest.fixture
def fake() -> FakeSagaboard:
    return FakeSagaboard()


@pytest.fixture
def make_store(fake: FakeSagaboard) -> Iterator[Any]:
    """Build stores on the fake with test-friendly timings; every one is closed afterwards."""
    stores: list[SagaboardStore] = []

    def make(**options: Any) -> SagaboardStore:
        options = {
            "transport": fake.transport(),
            "flush_interval": 0.005,
            "max_backoff": 0.02,
            "timeout": 2.0,
            **options,
        }
        store = SagaboardStore(URL, TOKEN, **options)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close(timeout=0.5)

"""What the API fuzzer acts on: sagas seeded through the public API, and the database's state.

The seed is what an agent would leave behind: mirrored sagas (rolled back, halted on
a failed undo, waiting for an approval) and sagas driven by hand (open, with steps),
so that generated requests reach real rows instead of answering 404.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.agent_runs import paused_storebot_events

# Tables a request may change. Not the token table (it only records use) nor heartbeats.
TABLES = (
    "sagaboard_saga", "sagaboard_step", "sagaboard_compensationattempt", "sagaboard_event",
    "sagaboard_approval", "sagaboard_approvalvote", "sagaboard_auditentry",
    "sagaboard_apirequest", "sagaboard_notification",
)  # fmt: skip


@dataclass
class Seed:
    """Identifiers that exist on the server, by the path parameters they fill."""

    saga_ids: list[str] = field(default_factory=list)
    steps: list[tuple[str, str]] = field(default_factory=list)
    approval_ids: list[int] = field(default_factory=list)


def seed(url: str, token: str) -> Seed:
    """Post the seed through the API (as an agent would) and say what now exists."""
    out = Seed()
    with httpx.Client(
        base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as api:

        def post(path: str, body: Any, expect: int) -> Any:
            response = api.post(path, json=body)
            assert response.status_code == expect, (path, response.text)
            return response.json()

        for saga_id, approval, fails in [
            ("mirror-waiting", True, False),  # COMPENSATING: refund_payment awaits approval
            ("mirror-failed", False, True),  # ROLLBACK_FAILED: return_item's undo failed
            ("mirror-done", False, False),  # ROLLED_BACK
        ]:
            post("/events", {"events": paused_storebot_events(saga_id, refund_approval=approval,
                                                    return_undo_fails=fails)}, 200)  # fmt: skip
            out.saga_ids.append(saga_id)
            out.steps += [(saga_id, f"step-{n}") for n in (1, 2, 3)]
        approval = post("/sagas/mirror-waiting/steps/step-2/approval", {"why": "seed"}, 200)
        out.approval_ids.append(approval["id"])

        for n in (1, 2):  # driven by hand: open, one step completed, one pending
            saga_id = f"manual-{n}"
            post("/sagas", {"event_id": f"seed-{n}", "name": "checkout", "id": saga_id}, 201)
            for tool in ("charge", "reserve"):
                step = post(f"/sagas/{saga_id}/steps", {
                    "event_id": f"seed-{n}-{tool}", "tool_name": tool, "input": {"n": n},
                    "undo": {"kind": "handler", "handler": "storebot.return_item"},
                }, 201)  # fmt: skip
                out.steps.append((saga_id, step["id"]))
            post(f"/sagas/{saga_id}/steps/step-1/complete",
                 {"event_id": f"seed-{n}-done", "output": {"ok": True}}, 200)  # fmt: skip
            out.saga_ids.append(saga_id)

        # Text the policy keeps (sagaboard.infra.text_policy): an id in one non-Latin script, a
        # name with a bidi override, a step whose input holds NUL and astral characters.
        saga_id = "заказ-1"
        post("/sagas", {"event_id": "seed-text", "name": "Возврат \u202e(1)", "id": saga_id}, 201)
        step = post(f"/sagas/{saga_id}/steps", {"event_id": "seed-text-step",
                    "tool_name": "возврат", "input": {"file": "a\x00b", "emoji": "\U0001f600"}},
                    201)  # fmt: skip
        out.saga_ids.append(saga_id)
        out.steps.append((saga_id, step["id"]))
    return out


def table_digests(cursor: Any) -> dict[str, str]:
    """A digest of every row of each table in ``TABLES``, through any DB-API cursor."""
    digests = {}
    for table in TABLES:
        cursor.execute(f"SELECT * FROM {table} ORDER BY id")
        digests[table] = hashlib.sha256(repr(cursor.fetchall()).encode()).hexdigest()
    return digests


class DatabaseState:
    """A digest per table of everything a request could change, read straight from the
    server's database (SQLite file or PostgreSQL), so a test can say "nothing changed".

    One connection, kept open (a connection per snapshot cost more than the request):
    outside a transaction each statement reads what is committed at that moment."""

    def __init__(self, database_url: str) -> None:
        self.url = database_url
        self._conn: Any = None

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        if self._conn is None:
            if self.url.startswith("sqlite:"):
                path = self.url.removeprefix("sqlite:///")
                # schemathesis may call the hooks from another thread in a later phase (one
                # at a time, --workers 1): the read-only connection may follow them.
                self._conn = sqlite3.connect(
                    f"file:{path}?mode=ro", uri=True, check_same_thread=False
                )
            else:
                import psycopg

                self._conn = psycopg.connect(self.url, autocommit=True)
        cursor = self._conn.cursor()
        try:
            yield cursor
        finally:
            cursor.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def snapshot(self) -> dict[str, str]:
        with self._cursor() as cursor:
            return table_digests(cursor)

    @staticmethod
    def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
        return [table for table in before if before[table] != after[table]]

"""SagaboardGate / AsyncSagaboardGate on a fake sagaboard: people decide, the agent's saga obeys.

The fake (``Decisions``) adds the decision endpoints of docs/api.md to the
conftest's ``FakeSagaboard`` (which takes the store's events): approvals
asked per step, long-polls that honour ``wait``, operators' pending actions
and their conditional acknowledgement.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from undo_core import (
    ApprovalRequest,
    AsyncSaga,
    Decision,
    DecisionAction,
    FailedCompensation,
    Saga,
    SagaRollbackError,
    SagaStatus,
    StepState,
    define_tool,
)
from undo_core.remote import (
    AsyncSagaboardClient,
    AsyncSagaboardGate,
    SagaboardClient,
    SagaboardGate,
    SagaboardStore,
)

URL = "https://sagaboard.test"
TOKEN = "sgb_ab12cd34_secret"
FAST = {"wait_seconds": 2.0, "poll": 0.01}
FakeSagaboard = Any  # conftest.FakeSagaboard, given by its ``fake`` fixture


SETTLED = {"ROLLED_BACK", "RESOLVED", "REJECTED", "FAILED"}


def _error(status: int, code: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message}})


@dataclass
class Decisions:
    """The decision endpoints, in memory; everything else goes to ``FakeSagaboard``."""

    fake: FakeSagaboard
    approvals: dict[int, dict[str, Any]] = field(default_factory=dict)
    by_step: dict[tuple[str, str], int] = field(default_factory=dict)
    pending: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    left: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    acks: list[tuple[str, str, dict[str, Any], str]] = field(default_factory=list)
    """(saga, step, body, the step's state on the server when the ack came)."""
    asked_in_state: list[str] = field(default_factory=list)
    seen: list[tuple[float, str, str]] = field(default_factory=list)
    failures: deque[str] = field(default_factory=deque)
    rules: dict[str, str] = field(default_factory=dict)
    """The server's policies: tool name -> why its undo needs approval."""
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------ what people do

    def approval_for(self, saga_id: str, step_id: str) -> dict[str, Any] | None:
        with self._lock:
            pk = self.by_step.get((saga_id, step_id))
            return dict(self.approvals[pk]) if pk else None

    def decide(
        self, pk: int, status: str, by: tuple[str, ...] = ("ann",), reason: str = "looks right"
    ) -> None:
        with self._lock:
            self.approvals[pk].update(
                status=status, decided_by=list(by), decided_reason=reason, decided_at="now"
            )

    def act(self, saga_id: str, step_id: str, action: str, reason: str = "") -> dict[str, Any]:
        request = {"action": action, "by": "user:olga", "reason": reason, "at": str(time.time())}
        with self._lock:
            if action == "leave":
                self.left[(saga_id, step_id)] = request
            else:
                self.pending[(saga_id, step_id)] = request
        return request

    def fail_next(self, kind: str, times: int = 1) -> None:
        self.failures.extend([kind] * times)

    def paths(self, method: str, suffix: str) -> list[str]:
        return [p for _, m, p in self.seen if m == method and p.endswith(suffix)]

    # ------------------------------------------------------------ transports

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            answer = self._route(request)
            if not callable(answer):
                return answer
            return _blocking(answer, _wait_of(request))

        return httpx.MockTransport(handle)

    def async_transport(self) -> httpx.MockTransport:
        async def handle(request: httpx.Request) -> httpx.Response:
            answer = self._route(request)
            if not callable(answer):
                return answer
            return await _awaiting(answer, _wait_of(request))

        return httpx.MockTransport(handle)

    # ------------------------------------------------------------ the server

    def _route(self, request: httpx.Request) -> httpx.Response | Callable[[bool], Any]:
        path = request.url.path
        parts = path.removeprefix("/api/v1/").split("/")
        mine = parts[0] == "approvals" or parts[-1] in (
            "approval",
            "decision",
            "ack",
            "approval-rule",
        )
        if not mine:
            return self.fake.handle(request)
        with self._lock:
            self.seen.append((time.monotonic(), request.method, path))
            failure = self.failures.popleft() if self.failures else None
        if failure == "down":
            raise httpx.ConnectError("connection refused", request=request)
        if failure in ("500", "404"):
            return _error(int(failure), "boom", f"injected {failure}")
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _error(401, "unauthorized", "a valid token is required")
        body = json.loads(request.content) if request.content else None
        if parts[0] == "approvals":
            return self._approval(int(parts[1]))
        saga_id, step_id = parts[1], parts[3]
        step = self.fake.steps.get(saga_id, {}).get(step_id)
        if step is None:
            return _error(404, "not_found", f"no step {step_id!r} in saga {saga_id!r}")
        if parts[-1] == "approval-rule":
            why = self.rules.get(step["tool_name"])
            return httpx.Response(200, json={"needed": why is not None, "why": why})
        if parts[-1] == "approval":
            return self._ask(saga_id, step_id, step["state"], body or {})
        if parts[-1] == "decision":
            return self._decision(saga_id, step_id)
        return self._ack(saga_id, step_id, step["state"], body or {})

    def _ask(self, saga_id: str, step_id: str, state: str, body: dict[str, Any]) -> httpx.Response:
        with self._lock:
            self.asked_in_state.append(state)
            pk = self.by_step.get((saga_id, step_id))
            if pk is None or self.approvals[pk]["status"] == "VOID":
                pk = next(self._ids)
                self.by_step[(saga_id, step_id)] = pk
                self.approvals[pk] = {
                    "id": pk, "saga_id": saga_id, "step_id": step_id, "status": "PENDING",
                    "required": 1, "why": body.get("why") or "asked", "decided_reason": "",
                    "decided_by": [], "plan_hash": "h", "created_at": "now", "expires_at": None,
                    "decided_at": None,
                }  # fmt: skip
            return httpx.Response(200, json=self.approvals[pk])

    def _approval(self, pk: int) -> httpx.Response | Callable[[bool], Any]:
        if pk not in self.approvals:
            return _error(404, "not_found", f"no approval {pk}")

        def answer(last: bool) -> httpx.Response | None:
            with self._lock:
                approval = dict(self.approvals[pk])
            if approval["status"] == "PENDING" and not last:
                return None
            return httpx.Response(200, json=approval)

        return answer

    def _decision(self, saga_id: str, step_id: str) -> Callable[[bool], Any]:
        def answer(last: bool) -> httpx.Response | None:
            with self._lock:
                key = (saga_id, step_id)
                found = self.left.get(key) or self.pending.get(key)
                state = self.fake.steps[saga_id][step_id]["state"]
            if found is None and state not in SETTLED and not last:
                return None
            empty = {"action": None, "by": None, "reason": None, "at": None}
            return httpx.Response(200, json={**(found or empty), "state": state})

        return answer

    def _ack(self, saga_id: str, step_id: str, state: str, body: dict[str, Any]) -> httpx.Response:
        with self._lock:
            pending = self.pending.get((saga_id, step_id))
            if pending is None or pending["action"] != body.get("action"):
                return _error(409, "not_pending", "nothing like that is pending")
            if body.get("at") is not None and body["at"] != pending["at"]:
                return _error(409, "not_pending", "another request is pending")
            del self.pending[(saga_id, step_id)]
            self.acks.append((saga_id, step_id, body, state))
        return httpx.Response(200, json={"acknowledged": body["action"], "state": state})


def _wait_of(request: httpx.Request) -> float:
    return float(request.url.params.get("wait", "0"))


def _blocking(answer: Callable[[bool], Any], wait: float) -> httpx.Response:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        response = answer(False)
        if response is not None:
            return response  # type: ignore[no-any-return]
        time.sleep(0.005)
    return answer(True)  # type: ignore[no-any-return]


async def _awaiting(answer: Callable[[bool], Any], wait: float) -> httpx.Response:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        response = answer(False)
        if response is not None:
            return response  # type: ignore[no-any-return]
        await asyncio.sleep(0.005)
    return answer(True)  # type: ignore[no-any-return]


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def decisions(fake: FakeSagaboard) -> Decisions:
    return Decisions(fake)


@pytest.fixture
def client(decisions: Decisions) -> Iterator[SagaboardClient]:
    with SagaboardClient(URL, TOKEN, transport=decisions.transport(), retries=0) as c:
        yield c


@pytest.fixture
def store(make_store: Any) -> SagaboardStore:
    return make_store()  # type: ignore[no-any-return]


def storebot(
    undone: list[str],
    *,
    refund_approval: bool = True,
    return_fails: int = 0,
    is_async: bool = False,
) -> tuple[Any, Any, Any]:
    fails = {"left": return_fails}

    def undo_return(output: Any, input: Any) -> None:
        if fails["left"] > 0:
            fails["left"] -= 1
            raise TimeoutError("upstream timed out")
        undone.append("return_item")

    def fedex(i: Any) -> None:
        raise ConnectionError("FedEx API returned 500")

    ret = define_tool("return_item", lambda i: {"rma": "RMA-882"}, undo_return)
    ref = define_tool(
        "refund_payment",
        lambda i: {"refund": "re_1"},
        lambda o: undone.append("refund_payment"),
        requires_approval=refund_approval,
    )
    return ret, ref, define_tool("generate_label", fedex)


def run_storebot(saga: Saga, tools: tuple[Any, Any, Any]) -> None:
    ret, ref, label = tools
    saga.execute(ret, {"order": "A-17"})
    saga.execute(ref, {"amount": 120})
    with pytest.raises(SagaRollbackError):
        saga.execute(label, {})


def soon(condition: Callable[[], Any], action: Callable[[Any], Any]) -> threading.Thread:
    """In another thread: once ``condition()`` gives something, ``action(it)``."""

    def run() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = condition()
            if found:
                action(found)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def approve_when_asked(decisions: Decisions, saga: Saga, status: str = "APPROVED") -> Any:
    return soon(
        lambda: decisions.approval_for(saga.id, "step-2"),
        lambda a: decisions.decide(a["id"], status),
    )


# ---------------------------------------------------------------- approvals (sync)


def test_an_approved_undo_runs_and_the_rollback_finishes(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    undone: list[str] = []
    gate = SagaboardGate(client, store=store, **FAST)
    saga = Saga("storebot", store=store, gate=gate)
    thread = approve_when_asked(decisions, saga)
    run_storebot(saga, storebot(undone))
    thread.join(5)
    assert saga.status is SagaStatus.ROLLED_BACK
    assert undone == ["refund_payment", "return_item"]
    refund = saga.step("step-2")
    assert refund.decided_by == "user:ann" and refund.decision_note == "looks right"
    # The store was flushed before asking: the server had the step waiting.
    assert decisions.asked_in_state == ["AWAITING_APPROVAL"]
    assert len(decisions.paths("POST", "/approval")) == 1


def test_the_servers_policy_holds_an_undo_nothing_local_flags(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    undone: list[str] = []
    decisions.rules["return_item"] = "policy 'returns' (v1) matched"
    saga = Saga("storebot", store=store, gate=SagaboardGate(client, store=store, **FAST))
    thread = soon(
        lambda: decisions.approval_for(saga.id, "step-1"),
        lambda a: decisions.decide(a["id"], "APPROVED"),
    )
    refund = approve_when_asked(decisions, saga)
    run_storebot(saga, storebot(undone))
    thread.join(5)
    refund.join(5)
    assert saga.status is SagaStatus.ROLLED_BACK and undone == ["refund_payment", "return_item"]
    assert saga.step("step-1").decided_by == "user:ann"
    assert len(decisions.paths("GET", "/approval-rule")) >= 1


def test_a_rejected_undo_does_not_run(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    undone: list[str] = []
    saga = Saga("storebot", store=store, gate=SagaboardGate(client, store=store, **FAST))
    thread = approve_when_asked(decisions, saga, "REJECTED")
    run_storebot(saga, storebot(undone))
    thread.join(5)
    refund = saga.step("step-2")
    assert refund.state is StepState.REJECTED and refund.decision_note == "looks right"
    assert refund.decided_by == "user:ann"
    assert undone == ["return_item"]


def test_an_expired_approval_is_a_rejection_by_the_system(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    saga = Saga("storebot", store=store, gate=SagaboardGate(client, store=store, **FAST))
    thread = soon(
        lambda: decisions.approval_for(saga.id, "step-2"),
        lambda a: decisions.decide(a["id"], "EXPIRED", by=(), reason=""),
    )
    run_storebot(saga, storebot([]))
    thread.join(5)
    refund = saga.step("step-2")
    assert refund.state is StepState.REJECTED and refund.decided_by == "system"


def test_no_decision_within_max_wait_pauses_the_rollback_until_resumed(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    undone: list[str] = []
    gate = SagaboardGate(client, store=store, max_wait=0.3, **FAST)
    saga = Saga("storebot", store=store, gate=gate)
    started = time.monotonic()
    run_storebot(saga, storebot(undone))
    assert 0.25 <= time.monotonic() - started < 3
    assert saga.status is SagaStatus.COMPENSATING
    assert saga.step("step-2").state is StepState.AWAITING_APPROVAL
    assert saga.step("step-1").state is StepState.COMPLETED  # LIFO: not undone before step-2
    assert undone == []

    approval = decisions.approval_for(saga.id, "step-2")
    assert approval is not None
    decisions.decide(approval["id"], "APPROVED", by=("ann", "bob"))
    saga.resume_rollback()
    assert saga.status is SagaStatus.ROLLED_BACK
    assert saga.step("step-2").decided_by == "user:ann, user:bob"
    assert len(decisions.approvals) == 1  # asked again, got the same approval


def test_max_wait_zero_looks_once(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    saga = Saga("storebot", store=store, gate=SagaboardGate(client, store=store, max_wait=0))
    run_storebot(saga, storebot([]))
    assert saga.status is SagaStatus.COMPENSATING
    assert len(decisions.paths("POST", "/approval")) == 1
    assert decisions.paths("GET", "/1") == []  # no long-poll


def test_a_void_approval_is_asked_for_again(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    saga = Saga("storebot", store=store, gate=SagaboardGate(client, store=store, **FAST))

    def void_then_approve(first: dict[str, Any]) -> None:
        decisions.decide(first["id"], "VOID", by=(), reason="the plan changed")
        soon(
            lambda: (
                (a := decisions.approval_for(saga.id, "step-2")) and a["id"] != first["id"] and a
            ),
            lambda second: decisions.decide(second["id"], "APPROVED"),
        )

    soon(lambda: decisions.approval_for(saga.id, "step-2"), void_then_approve)
    run_storebot(saga, storebot([]))
    assert saga.status is SagaStatus.ROLLED_BACK
    assert sorted(decisions.approvals) == [1, 2]


def test_cancel_stops_waiting_even_mid_request(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    cancel = threading.Event()
    gate = SagaboardGate(client, store=store, wait_seconds=10, poll=0.01, cancel=cancel)
    saga = Saga("storebot", store=store, gate=gate)
    soon(lambda: decisions.paths("GET", "/approvals/1"), lambda _: cancel.set())
    started = time.monotonic()
    run_storebot(saga, storebot([]))
    assert time.monotonic() - started < 2, "waited for the long-poll to end"
    assert saga.status is SagaStatus.COMPENSATING
    # Cancelled stays cancelled: the next question answers at once.
    request = ApprovalRequest(saga.id, saga.name, saga.step("step-2"), "why")
    assert gate.approve_compensation(request).action is DecisionAction.WAIT


def test_network_errors_are_retried_with_backoff(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    decisions.fail_next("down")
    decisions.fail_next("500")
    decisions.fail_next("down")
    saga = Saga(
        "storebot", store=store, gate=SagaboardGate(client, store=store, wait_seconds=2, poll=0.05)
    )
    thread = approve_when_asked(decisions, saga)
    run_storebot(saga, storebot([]))
    thread.join(5)
    assert saga.status is SagaStatus.ROLLED_BACK
    asks = [t for t, m, p in decisions.seen if p.endswith("/approval")]
    assert len(asks) == 4  # three failures, then an answer
    gaps = [b - a for a, b in itertools.pairwise(asks)]
    assert gaps[0] >= 0.02 and gaps[2] >= 0.09  # 0.05 s, doubling, with jitter of 0.5..1


def test_an_outage_longer_than_max_wait_pauses_the_rollback(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    decisions.fail_next("down", 1000)
    gate = SagaboardGate(client, store=store, max_wait=0.5, poll=0.05)
    saga = Saga("storebot", store=store, gate=gate)
    started = time.monotonic()
    run_storebot(saga, storebot([]))
    assert time.monotonic() - started < 3
    assert saga.status is SagaStatus.COMPENSATING
    assert saga.step("step-2").state is StepState.AWAITING_APPROVAL


def test_a_step_not_on_the_server_yet_is_asked_for_again(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    decisions.fail_next("404", 2)  # the step's events are late (no store given to the gate)
    saga = Saga("storebot", store=store, gate=SagaboardGate(client, **FAST))
    thread = approve_when_asked(decisions, saga)
    run_storebot(saga, storebot([]))
    thread.join(5)
    assert saga.status is SagaStatus.ROLLED_BACK
    assert len(decisions.paths("POST", "/approval")) == 3


def test_a_refused_token_is_not_retried(
    decisions: Decisions, store: SagaboardStore, caplog: pytest.LogCaptureFixture
) -> None:
    with SagaboardClient(URL, "sgb_wrong_token", transport=decisions.transport()) as bad:
        saga = Saga("storebot", store=store, gate=SagaboardGate(bad, store=store, **FAST))
        with caplog.at_level(logging.ERROR, "undo_core.remote"):
            run_storebot(saga, storebot([]))
    assert saga.status is SagaStatus.COMPENSATING
    assert len(decisions.paths("POST", "/approval")) == 1
    assert "401" in caplog.text


# ---------------------------------------------------------------- failed undos (sync)


def halted_saga(
    client: SagaboardClient, store: SagaboardStore, return_fails: int, **gate: Any
) -> tuple[Saga, SagaboardGate, tuple[Any, Any, Any], list[str]]:
    undone: list[str] = []
    the_gate = SagaboardGate(client, store=store, **{**FAST, **gate})
    saga = Saga("storebot", store=store, gate=the_gate, on_compensation_failure="halt")
    return (
        saga,
        the_gate,
        storebot(undone, refund_approval=False, return_fails=return_fails),
        undone,
    )


def test_an_operators_retry_reruns_the_undo_and_is_acknowledged_after(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    saga, gate, tools, undone = halted_saga(client, store, return_fails=1)
    with gate:
        soon(
            lambda: decisions.paths("GET", "/step-1/decision"),
            lambda _: decisions.act(saga.id, "step-1", "retry", "upstream is back"),
        )
        run_storebot(saga, tools)
        assert saga.status is SagaStatus.ROLLED_BACK
        assert undone == ["refund_payment", "return_item"]
        attempts = saga.step("step-1").compensation_attempts
        assert [(a.number, a.actor) for a in attempts] == [(1, None), (2, "user:olga")]
        assert decisions.acks == []  # carried out, acknowledged on the next call or close()
    assert len(decisions.acks) == 1
    _, step_id, body, state_then = decisions.acks[0]
    assert (step_id, body["action"], state_then) == ("step-1", "retry", "ROLLED_BACK")
    assert decisions.pending == {}


def test_a_retry_that_fails_again_is_acknowledged_before_waiting_again(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    saga, gate, tools, _ = halted_saga(client, store, return_fails=2)
    answers = iter([("retry", ""), ("resolve", "restocked by hand")])

    def operator() -> None:
        for action, reason in answers:
            deadline = time.monotonic() + 10
            while (saga.id, "step-1") in decisions.pending or not decisions.paths(
                "GET", "/step-1/decision"
            ):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            decisions.act(saga.id, "step-1", action, reason)

    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    with gate:
        run_storebot(saga, tools)
    thread.join(5)
    step = saga.step("step-1")
    assert step.state is StepState.RESOLVED and step.decision_note == "restocked by hand"
    assert step.decided_by == "user:olga"
    assert saga.status is SagaStatus.ROLLED_BACK
    assert [(a[2]["action"], a[3]) for a in decisions.acks] == [
        ("retry", "ROLLBACK_FAILED"),  # the second failure was on the server first
        ("resolve", "RESOLVED"),
    ]


def test_leaving_a_step_failed_ends_the_rollback_failed(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    saga, gate, tools, _ = halted_saga(client, store, return_fails=1)
    soon(
        lambda: decisions.paths("GET", "/step-1/decision"),
        lambda _: decisions.act(saga.id, "step-1", "leave", "finance handles it"),
    )
    with gate:
        run_storebot(saga, tools)
    assert saga.status is SagaStatus.ROLLBACK_FAILED
    assert saga.step("step-1").state is StepState.ROLLBACK_FAILED
    assert decisions.acks == []


def test_no_operator_within_max_wait_leaves_the_step_failed_until_resumed(
    decisions: Decisions, client: SagaboardClient, store: SagaboardStore
) -> None:
    saga, gate, tools, undone = halted_saga(client, store, return_fails=1, max_wait=0.3)
    started = time.monotonic()
    run_storebot(saga, tools)
    assert 0.25 <= time.monotonic() - started < 3
    assert saga.status is SagaStatus.ROLLBACK_FAILED
    # The server saw the failure (flushed before waiting), so an operator can act later...
    assert decisions.fake.steps[saga.id]["step-1"]["state"] == "ROLLBACK_FAILED"
    decisions.act(saga.id, "step-1", "retry")
    saga.resume_rollback()  # ...and resuming picks it up.
    assert saga.status is SagaStatus.ROLLED_BACK and undone[-1] == "return_item"
    gate.close()
    assert [a[2]["action"] for a in decisions.acks] == ["retry"]


def failed(saga_id: str = "s-1", step_id: str = "step-1") -> FailedCompensation:
    snapshot: Any = type("Snap", (), {"id": step_id})()
    return FailedCompensation(saga_id, "storebot", snapshot, "boom", 1)


def mirrored(fake: FakeSagaboard, saga_id: str = "s-1", step_id: str = "step-1") -> None:
    fake.steps.setdefault(saga_id, {})[step_id] = {"id": step_id, "state": "ROLLBACK_FAILED"}


def test_an_unacknowledged_action_is_handed_out_again_by_a_new_process(
    decisions: Decisions, client: SagaboardClient
) -> None:
    """At least once: a process that died after the retry but before the ack retries again."""
    mirrored(decisions.fake)
    decisions.act("s-1", "step-1", "retry")
    first = SagaboardGate(client, **FAST).compensation_failed(failed())
    assert first.action is DecisionAction.RETRY
    # (the process dies here: never acknowledged)
    again = SagaboardGate(client, **FAST).compensation_failed(failed())
    assert again.action is DecisionAction.RETRY and again.actor == "user:olga"


def test_an_action_already_carried_out_is_not_run_twice_when_its_ack_failed(
    decisions: Decisions, client: SagaboardClient
) -> None:
    mirrored(decisions.fake)
    decisions.act("s-1", "step-1", "retry")
    gate = SagaboardGate(client, max_wait=0.5, **FAST)
    assert gate.compensation_failed(failed()).action is DecisionAction.RETRY
    decisions.fail_next("down")  # the acknowledgement on the next call is lost
    second = gate.compensation_failed(failed())
    assert second.action is DecisionAction.LEAVE  # waited for a new decision, none came
    assert [a[2]["action"] for a in decisions.acks] == ["retry"]  # acknowledged on the way
    assert gate.acknowledge() == 0


def test_a_step_the_server_has_settled_is_not_waited_for(
    decisions: Decisions, client: SagaboardClient
) -> None:
    decisions.fake.steps["s-1"] = {"step-1": {"id": "step-1", "state": "ROLLED_BACK"}}
    started = time.monotonic()
    decision = SagaboardGate(client, **FAST).compensation_failed(failed())
    assert decision.action is DecisionAction.LEAVE
    assert re.search(r"\bROLLED_BACK\b", decision.reason or "")
    assert time.monotonic() - started < 1


# ---------------------------------------------------------------- configuration, client


@pytest.mark.parametrize(
    "options",
    [{"wait_seconds": 31}, {"wait_seconds": -1}, {"max_wait": -1}, {"poll": 0}, {"poll": -1}],
)
def test_bad_settings_are_refused(client: SagaboardClient, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SagaboardGate(client, **options)


def test_a_long_poll_gets_its_wait_added_to_the_read_timeout(decisions: Decisions) -> None:
    timeouts: list[Any] = []

    def spy(request: httpx.Request) -> httpx.Response:
        timeouts.append(request.extensions["timeout"])
        return httpx.Response(200, json={"id": 1, "status": "PENDING"})

    with SagaboardClient(URL, TOKEN, timeout=4, transport=httpx.MockTransport(spy)) as c:
        c.get_approval(1, wait=25)
        c.get_approval(1)
        with pytest.raises(ValueError, match=r"0\.\.30"):
            c.get_approval(1, wait=31)
    assert timeouts[0]["read"] == 29 and timeouts[0]["connect"] == 4
    assert timeouts[1]["read"] == 4


# ---------------------------------------------------------------- the async gate


@pytest.fixture
async def aclient(decisions: Decisions) -> Any:
    async with AsyncSagaboardClient(
        URL, TOKEN, transport=decisions.async_transport(), retries=0
    ) as c:
        yield c


def asoon(condition: Callable[[], Any], action: Callable[[Any], Any]) -> asyncio.Task[None]:
    async def run() -> None:
        for _ in range(1000):
            found = condition()
            if found:
                action(found)
                return
            await asyncio.sleep(0.01)

    return asyncio.ensure_future(run())


async def run_async_storebot(saga: AsyncSaga, tools: tuple[Any, Any, Any]) -> None:
    ret, ref, label = tools
    await saga.execute(ret, {"order": "A-17"})
    await saga.execute(ref, {"amount": 120})
    with pytest.raises(SagaRollbackError):
        await saga.execute(label, {})


async def test_async_an_approved_undo_runs(
    decisions: Decisions, aclient: AsyncSagaboardClient, store: SagaboardStore
) -> None:
    undone: list[str] = []
    async with AsyncSagaboardGate(aclient, store=store, **FAST) as gate:
        saga = AsyncSaga("storebot", store=store, gate=gate)
        decider = asoon(
            lambda: decisions.approval_for(saga.id, "step-2"),
            lambda a: decisions.decide(a["id"], "APPROVED"),
        )
        await run_async_storebot(saga, storebot(undone))
        await decider
    assert saga.status is SagaStatus.ROLLED_BACK
    assert undone == ["refund_payment", "return_item"]
    assert saga.step("step-2").decided_by == "user:ann"
    assert decisions.asked_in_state == ["AWAITING_APPROVAL"]


async def test_async_cancel_event_pauses_the_rollback(
    decisions: Decisions, aclient: AsyncSagaboardClient, store: SagaboardStore
) -> None:
    gate = AsyncSagaboardGate(aclient, store=store, wait_seconds=10, poll=0.01)
    saga = AsyncSaga("storebot", store=store, gate=gate)
    asoon(lambda: decisions.paths("GET", "/approvals/1"), lambda _: gate.cancel())
    started = time.monotonic()
    await run_async_storebot(saga, storebot([]))
    assert time.monotonic() - started < 2
    assert saga.status is SagaStatus.COMPENSATING


async def test_async_task_cancellation_propagates_and_the_saga_can_resume(
    decisions: Decisions, aclient: AsyncSagaboardClient, store: SagaboardStore
) -> None:
    gate = AsyncSagaboardGate(aclient, store=store, wait_seconds=10, poll=0.01)
    saga = AsyncSaga("storebot", store=store, gate=gate)
    undone: list[str] = []
    tools = storebot(undone)
    task = asyncio.ensure_future(run_async_storebot(saga, tools))
    while not decisions.paths("GET", "/approvals/1"):
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert saga.status is SagaStatus.COMPENSATING  # as after Decision.wait()
    approval = decisions.approval_for(saga.id, "step-2")
    assert approval is not None
    decisions.decide(approval["id"], "APPROVED")
    await saga.resume_rollback()
    assert saga.status is SagaStatus.ROLLED_BACK and undone == ["refund_payment", "return_item"]


async def test_async_retry_then_acknowledged_on_close(
    decisions: Decisions, aclient: AsyncSagaboardClient, store: SagaboardStore
) -> None:
    undone: list[str] = []
    tools = storebot(undone, refund_approval=False, return_fails=1)
    async with AsyncSagaboardGate(aclient, store=store, **FAST) as gate:
        saga = AsyncSaga("storebot", store=store, gate=gate, on_compensation_failure="halt")
        asoon(
            lambda: decisions.paths("GET", "/step-1/decision"),
            lambda _: decisions.act(saga.id, "step-1", "retry"),
        )
        await run_async_storebot(saga, tools)
        assert saga.status is SagaStatus.ROLLED_BACK
    assert [(a[2]["action"], a[3]) for a in decisions.acks] == [("retry", "ROLLED_BACK")]


async def test_async_network_errors_are_retried(
    decisions: Decisions, aclient: AsyncSagaboardClient
) -> None:
    mirrored(decisions.fake)
    decisions.act("s-1", "step-1", "resolve", "fixed by hand")
    decisions.fail_next("down")
    decisions.fail_next("500")
    gate = AsyncSagaboardGate(aclient, max_wait=5, **FAST)
    decision = await gate.compensation_failed(failed())
    assert decision == Decision.resolve("fixed by hand", actor="user:olga")
    assert len(decisions.paths("GET", "/decision")) == 3


def test_the_gates_fit_the_engines_protocols(client: SagaboardClient) -> None:
    from undo_core import ApprovalGate, AsyncApprovalGate

    assert isinstance(SagaboardGate(client), ApprovalGate)
    loop_free: Callable[[], Awaitable[None]]

    async def build() -> None:
        async with AsyncSagaboardClient(URL, TOKEN) as ac:
            assert isinstance(AsyncSagaboardGate(ac), AsyncApprovalGate)
            with pytest.raises(TypeError, match="AsyncSaga"):
                Saga("x", gate=AsyncSagaboardGate(ac))

    loop_free = build
    asyncio.run(loop_free())

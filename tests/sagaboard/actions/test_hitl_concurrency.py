"""People and workers at the same instant, on a real database: one decision, one undo.

Each race starts its callers on a ``threading.Barrier`` (a request thread each, with
its own database connection), then checks what must hold whatever the order:

- two approvers (or a double click) on one approval: one vote decides it, the other
  is told "already decided"; with four eyes and three approvers, exactly two votes;
- a double-clicked retry asks once, and two workers carrying it out run the undo once;
- an approval racing its expiry ends approved or expired, never both;
- while an undo runs, an operator's retry is refused and no second worker enters it.

The PostgreSQL run is the one that matters (row locks, conditional updates under
READ COMMITTED); on SQLite the IMMEDIATE transactions serialize the writers.
Transactional tests flush the groups the migrations made: ``roles_sync`` puts them back.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import connection

from sagaboard.access.services.roles import roles_sync
from sagaboard.actions.services import operator_actions, runner
from sagaboard.approvals.services import approvals
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.engine.services.undo_kinds import compensation
from sagaboard.infra import jobs
from sagaboard.models import (
    Approval,
    ApprovalPolicy,
    ApprovalVote,
    AuditEntry,
    CompensationAttempt,
    Project,
    Saga,
    Step,
)
from tests.support import racing
from tests.support.hitl import person, storebot_server_saga
from undo_core import LeaseError, UndoContext

pytestmark = [
    pytest.mark.slow,  # threads racing on real transactions
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("record_verified"),
    pytest.mark.record_rewritten("step.undo"),  # stuck(), running_undo(): another handler
]

HANDLER = "hitltest.counted_undo"
WAIT = 30.0  # every wait in this module is bounded by this many seconds


# ---------------------------------------------------------------- a counting undo


class UndoProbe:
    """What the test handler saw: one line per entry and exit, in a file (O_APPEND).

    Lines are written under a lock with one ``os.write`` each, so threads never
    interleave them; ``block`` makes the next N calls wait inside the undo until
    ``release`` is set (``entered`` says one is waiting).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.touch()
        self.lock = threading.Lock()
        self.block = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def _write(self, what: str, ctx: UndoContext) -> None:
        line = f"{what} {ctx.step_id} {ctx.idempotency_key} {ctx.attempt} {threading.get_ident()}\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def call(self, ctx: UndoContext, fail_first: int) -> str:
        with self.lock:
            blocking = self.block > 0
            self.block -= blocking
            self._write("enter", ctx)
        try:
            if blocking:
                self.entered.set()
                if not self.release.wait(WAIT):
                    raise TimeoutError("the test never released the undo")
            if ctx.attempt <= fail_first:
                raise ConnectionError(f"upstream timed out (attempt {ctx.attempt})")
            return f"undone with key {ctx.idempotency_key}"
        finally:
            with self.lock:
                self._write("exit", ctx)

    def lines(self) -> list[list[str]]:
        return [line.split() for line in self.path.read_text().splitlines()]

    def calls(self, step_id: str | None = None) -> int:
        return sum(1 for w, s, *_ in self.lines() if w == "enter" and step_id in (None, s))

    def most_at_once(self) -> int:
        """The most calls that were inside the undo at the same time."""
        inside = peak = 0
        for what, *_ in self.lines():
            inside += 1 if what == "enter" else -1
            peak = max(peak, inside)
        return peak


PROBE: UndoProbe | None = None


@compensation(HANDLER)
def counted_undo(input: Any, output: Any, ctx: UndoContext, fail_first: int = 0) -> str:
    assert PROBE is not None, "the probe fixture is not active"
    return PROBE.call(ctx, fail_first)


# ---------------------------------------------------------------- fixtures and helpers


@dataclass
class Sent:
    """Tasks the code enqueued (recorded, not sent: no broker in these tests)."""

    calls: list[tuple[str, int]]

    def of(self, name: str) -> list[int]:
        return [pk for task, pk in self.calls if task == name]


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Sent:
    """What the services queued for a worker, by task (recorded, not sent)."""
    calls: list[tuple[str, int]] = []

    def record(name: str, pk: int, countdown: float | None = None) -> None:
        calls.append((name.rsplit(".", 1)[-1], pk))

    monkeypatch.setattr(jobs, "enqueue_now", record)
    return Sent(calls)


@pytest.fixture
def probe(tmp_path: Path) -> Iterator[UndoProbe]:
    global PROBE
    PROBE = UndoProbe(tmp_path / "undo-calls.log")
    try:
        yield PROBE
    finally:
        PROBE.release.set()
        PROBE = None


@pytest.fixture
def shop(sent: Sent, probe: UndoProbe) -> Project:
    roles_sync(Group, Permission)
    return Project.objects.create(slug="shop", name="Shop")


def fresh(user: Any) -> Any:
    """The same person as another request would load them (no shared permission cache)."""
    return get_user_model().objects.get(pk=user.pk)


@dataclass
class Result:
    value: Any = None
    error: BaseException | None = None
    done: bool = False


def start(*calls: Callable[[], Any]) -> tuple[list[threading.Thread], list[Result]]:
    """Run each call on its own thread, all released at the same instant."""
    begin = racing.Start(len(calls), timeout=WAIT)
    results = [Result() for _ in calls]

    def run(i: int, fn: Callable[[], Any], out: Result) -> None:
        try:
            begin.wait(i)
            out.value = fn()
        except BaseException as err:  # reported to the test
            out.error = err
        finally:
            out.done = True
            connection.close()

    threads = [
        threading.Thread(target=run, args=(i, fn, out), daemon=True)
        for i, (fn, out) in enumerate(zip(calls, results, strict=True))
    ]
    for t in threads:
        t.start()
    return threads, results


def finish(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(timeout=WAIT)
    assert not any(t.is_alive() for t in threads), "a racing thread did not finish in time"


def race(*calls: Callable[[], Any]) -> list[Result]:
    threads, results = start(*calls)
    finish(threads)
    return results


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def refused(result: Result) -> DecisionRefused:
    assert isinstance(result.error, DecisionRefused), (result.value, result.error)
    return result.error


def audit(action: str, approval: Approval) -> list[AuditEntry]:
    return [
        e for e in AuditEntry.objects.filter(action=action) if e.data.get("approval") == approval.pk
    ]


def awaiting_approval(
    shop: Project, saga_id: str, *, by_policy: bool = False
) -> tuple[Saga, Approval]:
    """A server-run saga whose worker stopped before the refund's undo: approval PENDING.

    The refund needs approval because its step says so, or (``by_policy``) because a
    policy of the project matches it.
    """
    saga = storebot_server_saga(shop, saga_id, refund_needs_approval=not by_policy)
    assert runner.rollback_continue(saga.pk) == "COMPENSATING"
    return saga, Approval.objects.get(saga=saga, status=Approval.Status.PENDING)


def stuck(shop: Project, saga_id: str) -> tuple[Saga, Step]:
    """return_item's undo (the counting handler) failed once: the saga halted ROLLBACK_FAILED."""
    saga = storebot_server_saga(shop, saga_id, refund_needs_approval=False)
    Step.objects.filter(saga=saga, tool_name="return_item").update(
        undo={"kind": "handler", "handler": HANDLER, "args": {"fail_first": 1}}
    )
    assert runner.rollback_continue(saga.pk) == "ROLLBACK_FAILED"
    step = Step.objects.get(saga=saga, tool_name="return_item")
    assert step.state == "ROLLBACK_FAILED" and step.attempts.count() == 1
    return saga, step


def running_undo(shop: Project, saga_id: str, probe: UndoProbe) -> tuple[Saga, Step]:
    """A saga whose return_item undo (the counting handler) will block on its first call."""
    saga = storebot_server_saga(shop, saga_id, refund_needs_approval=False)
    Step.objects.filter(saga=saga, tool_name="return_item").update(
        undo={"kind": "handler", "handler": HANDLER}
    )
    probe.block = 1
    return saga, Step.objects.get(saga=saga, tool_name="return_item")


# ---------------------------------------------------------------- (a) two approvers


@pytest.mark.parametrize("who", ["two approvers", "a double click"])
def test_approving_one_approval_at_the_same_instant_decides_it_once(
    shop: Project, sent: Sent, who: str
) -> None:
    ann, cat = person("ann", "approver", shop), person("cat", "approver", shop)
    pair = (ann, cat) if who == "two approvers" else (ann, ann)
    for round_ in range(10):
        saga, approval = awaiting_approval(shop, f"two-{round_}")
        sent.calls.clear()
        results = race(*[
            lambda u=u, pk=approval.pk: approvals.approval_decide(
                approval_id=pk, user=fresh(u), decision="approve", reason="checked"
            )
            for u in pair
        ])  # fmt: skip
        won = [r for r in results if r.error is None]
        assert len(won) == 1, results
        assert won[0].value.decided and won[0].value.approval.status == Approval.Status.APPROVED
        lost = refused(next(r for r in results if r.error is not None))
        assert lost.code == "already_decided", lost.message
        assert lost.message.startswith("already decided: approved by "), lost.message
        approval.refresh_from_db()
        assert approval.status == Approval.Status.APPROVED
        assert ApprovalVote.objects.filter(approval=approval).count() == 1
        assert len(audit("approval.approve", approval)) == 1
        assert sent.of("rollback_continue") == [saga.pk]  # the worker is woken once


# ---------------------------------------------------------------- (b) four eyes, three approvers


def four_eyes(shop: Project) -> None:
    ApprovalPolicy.objects.create(
        project=shop, name="big refunds", tool_glob="refund_*",
        condition="input.amount > 100", approvers_required=2,
    )  # fmt: skip


def test_three_approvers_at_once_on_a_four_eyes_approval_leave_exactly_two_votes(
    shop: Project, sent: Sent
) -> None:
    """Two different people approve; the third arrives at a decided approval and is refused."""
    four_eyes(shop)
    people = [person(name, "approver", shop) for name in ("ann", "cat", "dan")]
    for round_ in range(5):
        saga, approval = awaiting_approval(shop, f"four-eyes-{round_}", by_policy=True)
        assert approval.required == 2
        sent.calls.clear()
        results = race(*[
            lambda u=u, pk=approval.pk: approvals.approval_decide(
                approval_id=pk, user=fresh(u), decision="approve", reason="agreed"
            )
            for u in people
        ])  # fmt: skip
        outcomes = [r.value for r in results if r.error is None]
        assert sorted(o.decided for o in outcomes) == [False, True], results
        third = refused(next(r for r in results if r.error is not None))
        assert third.code == "already_decided"
        assert third.message.startswith("already decided: approved by "), third.message
        approval.refresh_from_db()
        votes = list(ApprovalVote.objects.filter(approval=approval))
        assert approval.status == Approval.Status.APPROVED
        assert len(votes) == 2 and len({v.user_id for v in votes}) == 2
        assert len(audit("approval.approve", approval)) == 2
        assert sent.of("rollback_continue") == [saga.pk]


def test_approvals_and_a_reject_at_once_settle_consistently_with_the_votes(
    shop: Project, sent: Sent
) -> None:
    """Whatever the order, one vote settles it and the status follows the votes stored."""
    four_eyes(shop)
    ann, cat, dan = (person(name, "approver", shop) for name in ("ann", "cat", "dan"))
    seen: Counter[str] = Counter()
    for round_ in range(6):
        saga, approval = awaiting_approval(shop, f"mixed-{round_}", by_policy=True)
        sent.calls.clear()
        results = race(*[
            lambda u=u, d=d, pk=approval.pk: approvals.approval_decide(
                approval_id=pk, user=fresh(u), decision=d, reason="my call"
            )
            for u, d in ((ann, "approve"), (cat, "approve"), (dan, "reject"))
        ])  # fmt: skip
        approval.refresh_from_db()
        votes = list(ApprovalVote.objects.filter(approval=approval).order_by("at", "pk"))
        decisions = [v.decision for v in votes]
        seen[approval.status] += 1
        if "reject" in decisions:
            assert approval.status == Approval.Status.REJECTED
            assert decisions[-1] == "reject" and decisions.count("approve") <= 1
        else:
            assert approval.status == Approval.Status.APPROVED and decisions == ["approve"] * 2
        settling = [r.value for r in results if r.error is None and r.value.decided]
        assert len(settling) == 1
        assert sum(r.error is None for r in results) == len(votes)
        for r in results:
            if r.error is not None:
                assert refused(r).code == "already_decided"
        assert sent.of("rollback_continue") == [saga.pk]
    print("mixed race outcomes:", dict(seen))


# ---------------------------------------------------------------- (c) a double-clicked retry


def test_a_double_clicked_retry_is_asked_once_and_two_workers_run_the_undo_once(
    shop: Project, sent: Sent, probe: UndoProbe
) -> None:
    saga, step = stuck(shop, "double-retry")
    olga = person("olga", "operator", shop)
    sent.calls.clear()
    clicks = race(*[
        lambda: operator_actions.step_act(
            step_pk=step.pk, user=fresh(olga), action="retry", reason=""
        )
        for _ in range(2)
    ])  # fmt: skip
    assert sum(r.error is None for r in clicks) == 1, clicks
    loser = refused(next(r for r in clicks if r.error is not None))
    assert loser.code == "already_decided"
    assert loser.message.startswith("already requested: retry by user:olga"), loser.message
    step.refresh_from_db()
    assert step.pending_action and step.pending_action["action"] == "retry"
    assert sent.of("step_action_run") == [step.pk]
    assert AuditEntry.objects.filter(action="step.retry").count() == 1

    # Two workers get the task (a redelivery, the sweep): the first one in holds the
    # saga while the undo runs; the other must not run it as well.
    probe.block = 1
    threads, results = start(*[lambda: runner.step_action_run(step.pk) for _ in range(2)])
    assert probe.entered.wait(WAIT), "no worker entered the undo"
    wait_for(lambda: any(r.done for r in results), "the second worker to give up")
    probe.release.set()
    finish(threads)
    values = sorted(str(r.value) for r in results if r.error is None)
    errors = [r.error for r in results if r.error is not None]
    assert values == ["ROLLED_BACK"], results
    assert len(errors) == 1 and isinstance(errors[0], runner.Busy), errors
    assert probe.calls("step-1") == 2  # the failed first attempt, then the retry: once
    assert probe.most_at_once() == 1
    assert [(a.number, a.outcome) for a in step.attempts.order_by("number")] == [
        (1, "failed"),
        (2, "succeeded"),
    ]
    saga.refresh_from_db()
    step.refresh_from_db()
    assert (saga.status, step.state, step.pending_action) == ("ROLLED_BACK", "ROLLED_BACK", None)


def test_two_workers_released_at_once_on_a_retry_run_the_undo_once(
    shop: Project, probe: UndoProbe
) -> None:
    """No pause inside the undo: whichever order the workers take, one attempt is added."""
    olga = person("olga", "operator", shop)
    for round_ in range(5):
        _, step = stuck(shop, f"retry-race-{round_}")
        operator_actions.step_act(step_pk=step.pk, user=olga, action="retry", reason="")
        before = probe.calls(None)
        results = race(*[lambda pk=step.pk: runner.step_action_run(pk) for _ in range(2)])
        for r in results:
            # A worker that comes second is Busy, finds nothing pending, finds the step
            # settled, or (having read the saga before the first one wrote) is fenced off.
            ok = r.error is None and r.value in ("ROLLED_BACK", "nothing pending")
            assert ok or isinstance(r.error, runner.Busy | LeaseError), results
        assert probe.calls(None) - before == 1, probe.lines()
        assert probe.most_at_once() == 1
        assert CompensationAttempt.objects.filter(step=step).count() == 2
        assert CompensationAttempt.objects.filter(step=step, outcome="succeeded").count() == 1
        step.refresh_from_db()
        assert step.state == "ROLLED_BACK"


# ---------------------------------------------------------------- (d) approve racing expiry


def test_an_approval_racing_its_expiry_ends_with_one_outcome(shop: Project, sent: Sent) -> None:
    ApprovalPolicy.objects.create(
        project=shop, name="refunds", tool_glob="refund_*", timeout_seconds=60,
        on_expiry=ApprovalPolicy.OnExpiry.REJECT,
    )  # fmt: skip
    ann = person("ann", "approver", shop)
    seen: Counter[str] = Counter()
    for round_ in range(10):
        saga, approval = awaiting_approval(shop, f"expiry-{round_}", by_policy=True)
        assert approval.expires_at is not None
        after = approval.expires_at + timedelta(seconds=1)
        sent.calls.clear()
        decide, expire = race(
            lambda pk=approval.pk: approvals.approval_decide(
                approval_id=pk, user=fresh(ann), decision="approve", reason="ok"
            ),
            lambda now=after: approvals.approvals_expire(now=now),
        )
        assert expire.error is None, expire.error
        approval.refresh_from_db()
        votes = ApprovalVote.objects.filter(approval=approval).count()
        approved, expired = audit("approval.approve", approval), audit("approval.expired", approval)
        seen[approval.status] += 1
        if approval.status == Approval.Status.APPROVED:
            assert decide.error is None and decide.value.decided
            assert expire.value == 0
            assert (votes, len(approved), len(expired)) == (1, 1, 0)
            assert approval.escalated_at is None
        else:
            assert approval.status == Approval.Status.EXPIRED, approval.status
            assert refused(decide).code == "already_decided"
            assert refused(decide).message.startswith("already decided: expired"), decide.error
            assert expire.value == 1
            assert (votes, len(approved), len(expired)) == (0, 0, 1)
        assert sent.of("rollback_continue") == [saga.pk]
        # The worker then does what the one outcome says, and only that.
        runner.rollback_continue(saga.pk)
        refund = Step.objects.get(saga=saga, tool_name="refund_payment").state
        assert refund == ("ROLLED_BACK" if approval.status == "APPROVED" else "REJECTED")
    print("approve vs expiry outcomes:", dict(seen))


# ---------------------------------------------------------------- (e) retry while an undo runs


def test_a_retry_while_the_first_attempt_runs_is_refused_as_running(
    shop: Project, probe: UndoProbe
) -> None:
    saga, step = running_undo(shop, "first-attempt", probe)
    threads, (worker,) = start(lambda: runner.rollback_continue(saga.pk))
    try:
        assert probe.entered.wait(WAIT), "the worker never entered the undo"
        step.refresh_from_db()
        assert step.state == "COMPENSATING"
        olga = person("olga", "operator", shop)
        for action in ("retry", "resolve", "leave"):
            with pytest.raises(DecisionRefused) as no:
                operator_actions.step_act(step_pk=step.pk, user=olga, action=action, reason="hurry")
            assert no.value.code == "already_decided"
            assert no.value.message == "an undo attempt is running right now: wait for its outcome"
        # A second worker for the same saga (the sweep, a redelivery) keeps out.
        with pytest.raises(runner.Busy):
            runner.rollback_continue(saga.pk)
        step.refresh_from_db()
        assert (step.pending_action, step.left_at) == (None, None)
    finally:
        probe.release.set()
        finish(threads)
    assert (worker.error, worker.value) == (None, "ROLLED_BACK")
    assert probe.calls("step-1") == 1 and probe.most_at_once() == 1


def test_a_retry_while_a_retry_runs_is_refused_and_the_undo_never_runs_twice_at_once(
    shop: Project, probe: UndoProbe
) -> None:
    _, step = stuck(shop, "retry-running")
    olga, otto = person("olga", "operator", shop), person("otto", "operator", shop)
    operator_actions.step_act(step_pk=step.pk, user=olga, action="retry", reason="")
    probe.block = 1
    threads, (worker,) = start(lambda: runner.step_action_run(step.pk))
    try:
        assert probe.entered.wait(WAIT), "the worker never entered the undo"
        step.refresh_from_db()
        assert step.state == "COMPENSATING"
        with pytest.raises(DecisionRefused) as no:
            operator_actions.step_act(step_pk=step.pk, user=otto, action="retry", reason="")
        assert no.value.code == "already_decided"
        assert no.value.message.startswith("already requested: retry by user:olga")
        # The same task delivered to a second worker: it cannot get the saga.
        with pytest.raises(runner.Busy):
            runner.step_action_run(step.pk)
        # Whatever the second worker left behind, a retry is still refused while it runs.
        with pytest.raises(DecisionRefused) as again:
            operator_actions.step_act(step_pk=step.pk, user=otto, action="retry", reason="")
        assert again.value.code == "already_decided"
    finally:
        probe.release.set()
        finish(threads)
    assert (worker.error, worker.value) == (None, "ROLLED_BACK")
    assert probe.calls("step-1") == 2 and probe.most_at_once() == 1
    assert CompensationAttempt.objects.filter(step=step).count() == 2


# ---------------------------------------------------------------- bugs this module exposes


def test_a_retry_asked_while_another_worker_holds_the_saga_is_not_lost(
    shop: Project, probe: UndoProbe
) -> None:
    saga, step = stuck(shop, "lost-retry")
    hold, held = threading.Event(), threading.Event()

    def other_worker() -> None:  # e.g. the sweep's rollback_continue, holding the lease
        with runner.attached(Saga.objects.select_related("project").get(pk=saga.pk)):
            held.set()
            hold.wait(WAIT)

    threads, (other,) = start(other_worker)
    try:
        assert held.wait(WAIT)
        operator_actions.step_act(step_pk=step.pk, user=person("olga", "operator", shop),
                            action="retry", reason="")  # fmt: skip
        with pytest.raises(runner.Busy):
            runner.step_action_run(step.pk)  # the task retries after busy.retry_in
    finally:
        hold.set()
        finish(threads)
    assert other.error is None
    step.refresh_from_db()
    assert step.pending_action is not None, "the operator's retry request was dropped"
    assert runner.step_action_run(step.pk) == "ROLLED_BACK"  # the task's retry


def test_an_undo_longer_than_the_lease_is_not_run_again_concurrently(
    shop: Project, probe: UndoProbe, settings: Any
) -> None:
    settings.SAGABOARD_WORKER_LEASE_SECONDS = 1.0  # stands for the default 60 s
    saga, _ = running_undo(shop, "long-undo", probe)
    threads, (first,) = start(lambda: runner.rollback_continue(saga.pk))
    second = Result()
    try:
        assert probe.entered.wait(WAIT), "the worker never entered the undo"
        time.sleep(1.5)  # the undo is still running, one and a half leases later
        # The sweep hands out a COMPENSATING saga whose lease ran out (after 30 s idle):
        listed = ("saga", saga.pk) in runner.orphaned_work(stale_seconds=0)
        try:
            second.value = runner.rollback_continue(saga.pk)  # what the sweep's task runs
        except runner.Busy as busy:
            second.error = busy
    finally:
        probe.release.set()
        finish(threads)
    assert probe.most_at_once() == 1, (listed, second, first, probe.lines())
    assert probe.calls("step-1") == 1

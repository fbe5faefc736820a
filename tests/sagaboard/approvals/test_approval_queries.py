"""The approval round trip's database work, counted: it must not creep back up.

From an approver's click to the approved undo's first line the time is mostly
database round trips, and on PostgreSQL mostly commits (each waits for a WAL
flush). ``benchmarks.approval`` measures the time; this pins the counts that
drive it, on a real (transactional) database so commits are real commits:

- the decision (``approval_decide``) is one transaction;
- the worker, from the task's start to the undo's first line, reads the saga,
  its steps and the policies once, does not lock an approval that is already
  decided, takes its lease in the first transition's transaction, and that
  transition reads nothing (its store knows the saga from the task's rows).

A count here is an upper bound: fewer is fine (lower the number), more fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connection

from sagaboard.access.services.roles import roles_sync
from sagaboard.actions.services import runner
from sagaboard.approvals.services import approvals
from sagaboard.engine.services.undo_kinds import compensation
from sagaboard.infra import jobs
from sagaboard.models import Approval, ApprovalPolicy, Project, Saga, Step
from sagaboard.record.services import manual_flow
from tests.support.hitl import person
from undo_core import UndoContext

pytestmark = pytest.mark.django_db(transaction=True)

HANDLER = "querycount.first_line"
WRITES = ("INSERT", "UPDATE", "DELETE")


@dataclass
class Trips:
    """The statements and commits of this thread's connection while counting."""

    statements: list[str] = field(default_factory=list)
    commits: int = 0
    at_undo: tuple[int, int] | None = None
    """(statements, commits) when the undo's first line ran."""

    def statement(self, execute: Callable[..., Any], sql: str, *rest: Any) -> Any:
        if not sql.startswith("BEGIN"):  # SQLite's explicit BEGIN: the commit is counted
            self.statements.append(sql)
        if not connection.in_atomic_block and sql.lstrip().upper().startswith(WRITES):
            self.commits += 1  # autocommit: the statement is a transaction (and a flush) of its own
        return execute(sql, *rest)

    def report(self, what: str) -> str:
        lines = "\n".join(f"  {sql[:160]}" for sql in self.statements)
        return f"{what}: {len(self.statements)} statements, {self.commits} commits\n{lines}"


COUNTING: Trips | None = None


@compensation(HANDLER)
def first_line(input: Any, output: Any, ctx: UndoContext) -> str:
    if COUNTING is not None and COUNTING.at_undo is None:
        COUNTING.at_undo = (len(COUNTING.statements), COUNTING.commits)
    return "undone"


@pytest.fixture
def trips() -> Iterator[Callable[[], Any]]:
    """``with trips() as t:`` counts statements and commits of the code inside."""
    from contextlib import contextmanager

    @contextmanager
    def counting() -> Iterator[Trips]:
        global COUNTING
        t = Trips()
        real_commit = connection.commit

        def commit() -> None:
            t.commits += 1
            real_commit()

        connection.ensure_connection()
        connection.commit = commit  # on this connection object only, removed below
        COUNTING = t
        try:
            with connection.execute_wrapper(t.statement):
                yield t
        finally:
            COUNTING = None
            del connection.commit

    yield counting


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sagas whose rollback the code enqueued (recorded, not sent: no broker here)."""
    queued: list[int] = []

    def record(name: str, pk: int, countdown: float | None = None) -> None:
        queued.append(pk)

    monkeypatch.setattr(jobs, "enqueue_now", record)
    return queued


@pytest.fixture
def gated(sent: list[int]) -> tuple[Saga, Approval, Any]:
    """The benchmark's saga: one refund step, a policy on ``refund_*``, waiting at the gate."""
    roles_sync(Group, Permission)
    project = Project.objects.create(slug="shop", name="Shop")
    ApprovalPolicy.objects.create(
        project=project, name="refunds need a person", tool_glob="refund_*", updated_by="t"
    )
    ev = {"project": project, "saga_id": "refund-1"}
    manual_flow.saga_begin(**ev, event_id="e1", name="refund")
    step = manual_flow.step_add(
        **ev, event_id="e2", tool_name="refund_payment", input={"amount": 120},
        undo={"kind": "handler", "handler": HANDLER},
    )  # fmt: skip
    manual_flow.step_complete(**ev, event_id="e3", step_id=step, output={"refund": "re_1"})
    manual_flow.saga_rollback_request(**ev, event_id="e4", reason="label failed", actor=None)
    saga = Saga.objects.get(project=project, saga_id="refund-1")
    assert runner.rollback_continue(saga.pk) == "COMPENSATING"
    approval = Approval.objects.get(saga=saga, status=Approval.Status.PENDING)
    return saga, approval, person("ann", "approver", project)


def test_an_approval_is_decided_in_one_transaction(
    gated: tuple[Saga, Approval, Any], trips: Callable[[], Any], sent: list[int]
) -> None:
    saga, approval, ann = gated
    with trips() as t:
        outcome = approvals.approval_decide(
            approval_id=approval.pk, user=ann, decision="approve", reason="refund was wrong"
        )
    print(t.report("approval_decide"))
    assert outcome.decided and sent[-1] == saga.pk
    # Was 15 statements: the permission and project look-ups, the approval, saga and step
    # one by one, the votes three times, the saga's driver again after the commit.
    # Two more since the audit log is hash-chained: its head locked, then advanced.
    assert len(t.statements) <= 10 and t.commits == 1, t.report("approval_decide")


def test_an_approved_undo_starts_after_few_queries_and_one_commit(
    gated: tuple[Saga, Approval, Any], trips: Callable[[], Any]
) -> None:
    saga, approval, ann = gated
    approvals.approval_decide(
        approval_id=approval.pk, user=ann, decision="approve", reason="refund was wrong"
    )
    with trips() as t:
        assert runner.rollback_continue(saga.pk) == "ROLLED_BACK"
    print(t.report("rollback_continue"))
    assert t.at_undo is not None, "the undo never ran"
    statements, commits = t.at_undo
    print(f"to the undo's first line: {statements} statements, {commits} commits")
    assert Step.objects.get(saga=saga).state == "ROLLED_BACK"
    # Was 22 statements and 3 commits: the saga read twice, the step four times, the
    # policies twice, the lease a commit of its own, a locked read of the decision.
    # One more since the saga row keeps its rollback outcome (14). Then 10: the store
    # knows the saga from the task's rows, so the COMPENSATING write reads nothing (not
    # the saga under lock, nor its steps, nor the step: 3 fewer), and the undo goes by
    # the approval the gate has just read. What is left: the saga, its steps, their
    # attempts, the policies, the step at the gate, the approval and its votes; the
    # saga, the step and the event written.
    assert statements <= 10 and commits == 1, t.report("to the undo")


def test_the_approve_button_is_one_request_with_one_commit(
    gated: tuple[Saga, Approval, Any], trips: Callable[[], Any], sent: list[int], client: Any
) -> None:
    """The page's htmx POST, as an approver's click sends it: session, decision, fragment."""
    saga, approval, ann = gated
    client.force_login(ann)
    with trips() as t:
        answer = client.post(
            f"/approvals/{approval.pk}/decide/",
            {"decision": "approve", "reason": "refund was wrong"},
            headers={"HX-Request": "true"},
        )
    print(t.report("POST /approvals/<pk>/decide/"))
    assert answer.status_code == 200 and b"approved" in answer.content
    assert sent[-1] == saga.pk
    # Was 18 statements (the view then read the step and the saga again for its message).
    assert len(t.statements) <= 12 and t.commits == 1, t.report("the POST")  # 2: audit chain

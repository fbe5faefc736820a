"""The compensation plan is a promise, checked as a property over random chains of actions.

A Hypothesis state machine builds small sagas (every undo kind sagaboard runs, undos that
fail once or always, steps with no undo, approval gates, undos that live in an agent that is
alive or gone) and applies random sequences of operator actions (stop, approve, reject,
retry, force-resolve, leave; batch retries and resolves over a filter, and their
cancellation, also while a worker runs them) interleaved with agent actions and worker
runs. Work is queued the way production queues it (``jobs`` on commit: the transactions
really commit) and a worker rule runs the real Celery task functions
(``sagaboard.worker.tasks``), which call the runner and the batch runner.

After every step it checks:

- every undo attempt the record holds as run is a call of that undo's code, and each call
  is recorded (an undo nothing here can run is recorded as "not run: <why>");
- each step moved only as its plan line, read just before, said it would: "nothing to
  undo" never moves, "will run unattended" runs without an approval, "will need
  approval" runs only once approved, "waits for an operator" is never attempted, "runs in
  the agent" is never run by a worker, "done"/"left failed" never move;
- no saga is left where nobody can act (no dead ends) once its queued work has run;
- the API's view, the saga page's badge, the list row, the audit log and the event log's
  replay (``sagaboard_verify``) agree with the stored record;
- a batch job keeps its word: its counts are its items' outcomes; an item refused says why
  and its step was not touched; an item's outcome, once known, is what its step came to
  (a retry ROLLED_BACK succeeded, one failed again failed, a resolve RESOLVED succeeded);
  once the queued work has run, every job is finished or cancelled (none stuck finishing),
  with one start and one end in the audit log.

The example budget is small by default (the ``chains-ci`` profile: CI runs it on SQLite and
PostgreSQL); ``SAGABOARD_CHAIN_EXAMPLES`` / ``SAGABOARD_CHAIN_STEPS`` change it, and
``SAGABOARD_CHAIN_PROFILE=chains-long`` runs it at length.
"""

from __future__ import annotations

import html
import os
import uuid
from collections import Counter
from typing import Any

import pytest
from celery import current_app
from celery.exceptions import Retry
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.http import QueryDict
from django.test import Client
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from sagaboard.access.services.roles import roles_sync
from sagaboard.access.services.tokens import token_create
from sagaboard.actions.services import operator_actions, saga_stop, work_queues
from sagaboard.actions.services.batch_outcomes import item_counts
from sagaboard.approvals.services import approvals
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.batches.services import batches
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.engine.services.undo_kinds import compensation
from sagaboard.engine.services.worker_store import Busy
from sagaboard.errors import ServiceError
from sagaboard.infra import jobs
from sagaboard.models import Approval, AuditEntry, BatchItem, BatchJob, Project, Saga, Step
from sagaboard.record.services import manual_flow, verify
from undo_core import RollbackRequestedError, SagaStatus, StepState, define_tool
from undo_core import Saga as EngineSaga

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CALLS: Counter[str] = Counter()
"""How often each step's server-side undo really ran (by idempotency key)."""


@compensation("chains.undo")
def _chain_undo(input: Any, output: Any, ctx: Any, fail: int = 0) -> str:
    CALLS[ctx.idempotency_key] += 1
    if ctx.attempt <= fail:
        raise ConnectionError(f"upstream down (attempt {ctx.attempt})")
    return "undone"


AGENT_CALLS: Counter[str] = Counter()


def _agent_undo(output: Any, input: Any, ctx: Any) -> None:
    AGENT_CALLS[ctx.idempotency_key] += 1


AGENT_TOOL = define_tool("reserve", lambda inp: {"ok": True}, _agent_undo)
AGENT_NO_UNDO = define_tool("notify", lambda inp: {"sent": True})

UNDOS: dict[str, tuple[dict[str, Any], bool]] = {
    "ok": ({"kind": "handler", "handler": "chains.undo", "args": {"fail": 0}}, False),
    "once": ({"kind": "handler", "handler": "chains.undo", "args": {"fail": 1}}, False),
    "always": ({"kind": "handler", "handler": "chains.undo", "args": {"fail": 99}}, False),
    "none": ({"kind": "none"}, False),
    "approval": ({"kind": "handler", "handler": "chains.undo", "args": {"fail": 0}}, True),
}

QUEUE: list[tuple[str, tuple[Any, ...]]] = []
"""The broker: what ``jobs`` queued once its transaction committed."""

_TASK_OF = {
    jobs.ROLLBACK_CONTINUE: "saga",
    jobs.STOP_RUN: "saga",
    jobs.STEP_ACTION_RUN: "step",
}
ENDED = (BatchJob.State.FINISHED, BatchJob.State.CANCELLED)


def _enqueue(name: str, *args: Any, countdown: float | None = None) -> None:
    QUEUE.append((name, args))


def _user(name: str, role: str, project: Project) -> Any:
    user = get_user_model().objects.create(username=name)  # no password: nobody logs in
    user.groups.add(Group.objects.get(name=role))
    project.members.add(user)
    return get_user_model().objects.get(pk=user.pk)  # permissions read afresh


def _eid() -> str:
    return uuid.uuid4().hex


Facts = tuple[str, int, int, frozenset[str]]
"""A step as a promise is checked against: state, undos that ran, undos not run (the agent's,
recorded in words), and the statuses of its approvals."""


def _facts(step: Step, approvals_by_step: dict[int, set[str]]) -> Facts:
    attempts = list(step.attempts.all())
    not_run = sum(1 for a in attempts if (a.error or "").startswith("not run:"))
    return (
        step.state,
        len(attempts) - not_run,
        not_run,
        frozenset(approvals_by_step.get(step.pk, set())),
    )


class Chains(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        call_command("flush", interactive=False, verbosity=0)  # a fresh database per example
        roles_sync(Group, Permission)
        QUEUE.clear()
        self.project = Project.objects.create(slug="chains", name="Chains")
        self.olga = _user("olga", "operator", self.project)
        self.ann = _user("ann", "approver", self.project)
        self.admin = _user("root", "admin", self.project)
        self.viewer = Client()
        self.viewer.force_login(self.admin)
        self.api = Client(
            headers={
                "authorization": f"Bearer {token_create(project=self.project, label='a').secret}"
            }
        )
        self.agents: dict[str, EngineSaga] = {}
        self.promises: dict[int, tuple[str, Facts]] = {}
        self.audited: Counter[str] = Counter()
        self.last = ""
        self.touched: set[str] = set()
        self.count = 0
        self.batches: list[int] = []
        self.outcomes_checked: set[int] = set()
        CALLS.clear()
        AGENT_CALLS.clear()

    # ---------------------------------------------------------------- sagas

    @rule(
        kinds=st.lists(st.sampled_from(sorted(UNDOS)), min_size=1, max_size=3),
        failing=st.booleans(),
    )
    def server_saga(self, kinds: list[str], failing: bool) -> None:
        """A saga sagaboard runs: its steps, then a failed step and the rollback, or running."""
        self.count += 1
        saga_id = f"s{self.count}"
        p = self.project
        manual_flow.saga_begin(project=p, event_id=_eid(), name="chain", saga_id=saga_id)
        for kind in kinds:
            undo, gated = UNDOS[kind]
            step_id = manual_flow.step_add(
                project=p, event_id=_eid(), saga_id=saga_id, tool_name=f"t_{kind}",
                input={"k": kind}, undo=undo, requires_approval=gated,
            )  # fmt: skip
            manual_flow.step_complete(
                project=p, event_id=_eid(), saga_id=saga_id, step_id=step_id, output={"ok": 1}
            )
        if failing:
            manual_flow.saga_rollback_request(
                project=p, event_id=_eid(), saga_id=saga_id, reason="a step failed", actor=None
            )
        self._did("server_saga", saga_id)

    @rule(alive=st.booleans(), with_plain_step=st.booleans())
    def agent_saga(self, alive: bool, with_plain_step: bool) -> None:
        """A saga run by an engine in its own process (the demo's loader, an app's code)."""
        self.count += 1
        saga_id = f"a{self.count}"
        engine = EngineSaga("chain-agent", saga_id=saga_id, store=DjangoStore(self.project))
        engine.execute(AGENT_TOOL, {"n": 1})
        if with_plain_step:
            engine.execute(AGENT_NO_UNDO, {"n": 2})
        if alive:
            self.agents[saga_id] = engine  # holds its lease
        else:
            engine.release()  # the process is gone
        self._did("agent_saga", saga_id)

    @precondition(lambda self: bool(self.agents))
    @rule(data=st.data())
    def agent_rolls_back(self, data: st.DataObject) -> None:
        """The live agent rolls its saga back itself (it heard a stop, or a step failed)."""
        saga_id = data.draw(st.sampled_from(sorted(self.agents)))
        engine = self.agents.pop(saga_id)
        engine.rollback()
        engine.release()
        saga_stop.requests_closed(self.project, [saga_id])
        self._did("agent", saga_id)

    @precondition(lambda self: bool(self.agents))
    @rule(data=st.data())
    def agent_steps(self, data: st.DataObject) -> None:
        """The live agent runs its next step: a stop asked meanwhile is heard here."""
        saga_id = data.draw(st.sampled_from(sorted(self.agents)))
        engine = self.agents[saga_id]
        try:
            engine.execute(AGENT_TOOL, {"n": 3})
        except RollbackRequestedError:
            self.agents.pop(saga_id).release()  # rolled back in its own process
        self._did("agent", saga_id)

    @precondition(lambda self: bool(self.agents))
    @rule(data=st.data())
    def agent_goes_away(self, data: st.DataObject) -> None:
        saga_id = data.draw(st.sampled_from(sorted(self.agents)))
        self.agents.pop(saga_id).release()
        self._did("agent_gone", saga_id)

    # ---------------------------------------------------------------- operators

    def _sagas(self, *statuses: str) -> list[str]:
        return sorted(
            Saga.objects.filter(project=self.project, status__in=statuses).values_list(
                "saga_id", flat=True
            )
        )

    @precondition(lambda self: bool(self._sagas(SagaStatus.IN_PROGRESS)))
    @rule(data=st.data())
    def stop(self, data: st.DataObject) -> None:
        saga_id = data.draw(st.sampled_from(self._sagas(SagaStatus.IN_PROGRESS)))
        saga = Saga.objects.get(project=self.project, saga_id=saga_id)
        self._act(
            "saga.stop_requested",
            saga_id,
            lambda: saga_stop.rollback_request(saga_pk=saga.pk, user=self.olga, reason="stop"),
        )

    def _steps(self, *states: str) -> list[int]:
        return sorted(
            Step.objects.filter(saga__project=self.project, state__in=states).values_list(
                "pk", flat=True
            )
        )

    @precondition(lambda self: bool(self._steps(StepState.ROLLBACK_FAILED, StepState.IN_DOUBT)))
    @rule(data=st.data(), action=st.sampled_from(["retry", "resolve", "leave"]))
    def operator_acts(self, data: st.DataObject, action: str) -> None:
        failed = self._steps(StepState.ROLLBACK_FAILED, StepState.IN_DOUBT)
        step = Step.objects.select_related("saga").get(pk=data.draw(st.sampled_from(failed)))
        self._act(
            f"step.{action}",
            step.saga.saga_id,
            lambda: operator_actions.step_act(
                step_pk=step.pk, user=self.olga, action=action, reason=f"{action} by hand"
            ),
        )

    def _pending(self) -> list[int]:
        return sorted(
            Approval.objects.filter(
                saga__project=self.project, status=Approval.Status.PENDING
            ).values_list("pk", flat=True)
        )

    @precondition(lambda self: bool(self._pending()))
    @rule(data=st.data(), decision=st.sampled_from(["approve", "reject"]))
    def approver_decides(self, data: st.DataObject, decision: str) -> None:
        pk = data.draw(st.sampled_from(self._pending()))
        approval = Approval.objects.select_related("saga").get(pk=pk)
        self._act(
            f"approval.{decision}",
            approval.saga.saga_id,
            lambda: approvals.approval_decide(
                approval_id=pk, user=self.ann, decision=decision, reason=f"{decision}d"
            ),
            audited=False,  # an approval's decision is audited under its own names
        )

    def _act(self, action: str, saga_id: str, call: Any, *, audited: bool = True) -> None:
        try:
            call()
        except (DecisionRefused, ServiceError) as refused:
            assert refused.status < 500, refused
            self._did(f"refused {action}", saga_id)
            return
        if audited:
            self.audited[action] += 1
        self._did(action, saga_id)

    # ---------------------------------------------------------------- batch jobs

    @precondition(lambda self: bool(self._steps(StepState.ROLLBACK_FAILED, StepState.IN_DOUBT)))
    @rule(
        data=st.data(),
        action=st.sampled_from(["retry", "resolve"]),
        over=st.sampled_from(["all", "tool", "saga"]),
    )
    def operator_starts_batch(self, data: st.DataObject, action: str, over: str) -> None:
        """Retry or resolve all a filter matches (every failed undo, one tool's, one saga's),
        confirmed at the count the preview showed."""
        failed = self._steps(StepState.ROLLBACK_FAILED, StepState.IN_DOUBT)
        if action == "retry":  # aimed at undos a worker can run (agents' are refused anyway,
            # and "all" still takes them in), so that a retry that fails again is reached
            here = Step.objects.filter(pk__in=failed, saga__driver=Saga.Driver.SERVER)
            failed = sorted(here.values_list("pk", flat=True)) or failed
        step = Step.objects.select_related("saga").get(pk=data.draw(st.sampled_from(failed)))
        query = QueryDict(mutable=True)
        query["project"] = "chains"
        if over == "tool":
            query["tool"] = step.tool_name
        elif over == "saga":
            query["q"] = step.saga.saga_id
        try:
            preview = batches.batch_preview(user=self.olga, action=action, query=query)
            job = batches.batch_create(
                user=self.olga, action=action, query=query, reason=f"batch {action}",
                expected=preview.count,
            )  # fmt: skip
        except (DecisionRefused, ServiceError) as refused:  # nothing (left) matches the filter
            assert refused.status < 500, refused
            self._did("refused batch", "")
            return
        self.batches.append(job.pk)
        self.audited["batch.start"] += 1
        self._did("batch", "")

    @precondition(lambda self: bool(self.batches))
    @rule(data=st.data())
    def operator_cancels_batch(self, data: st.DataObject) -> None:
        self._batch_cancel(data.draw(st.sampled_from(self.batches)))

    def _batch_cancel(self, pk: int) -> None:
        try:
            batches.batch_cancel(user=self.olga, pk=pk)
        except DecisionRefused as refused:  # it has made its requests, or ended, already
            assert refused.status == 409, refused
            self._did("refused batch.cancel", "")
            return
        self.audited["batch.cancel"] += 1
        self._did("batch.cancel", "")

    def _batch_run(self, job_pk: int, cancel_midway: bool) -> None:
        """The real task; with ``cancel_midway`` a colleague cancels the job after its first
        chunk (the worker holds it, running). A refused item's step is as it was before."""
        items = {i.pk: i.target_pk for i in BatchItem.objects.filter(job_id=job_pk, outcome="")}
        before = {pk: self._untouched(pk) for pk in items.values()}
        real = batches._chunk_run

        def chunk_then_cancel(*args: Any) -> list[BatchItem]:
            done = real(*args)
            batches._chunk_run = real
            self._batch_cancel(job_pk)
            return done

        if cancel_midway:
            batches._chunk_run = chunk_then_cancel
        try:
            current_app.tasks[jobs.BATCH_RUN].run(job_pk)
        finally:
            batches._chunk_run = real
        job = BatchJob.objects.get(pk=job_pk)
        acted = BatchItem.objects.filter(pk__in=list(items)).exclude(outcome="")
        for item in acted:
            self.touched.add(Step.objects.get(pk=item.target_pk).saga.saga_id)
            if item.outcome == "refused":
                assert item.message, f"batch {job_pk}: {item.label} refused without a why"
                assert self._untouched(item.target_pk) == before[item.target_pk], (
                    f"batch {job_pk}: {item.label} was refused ({item.message}) but its step moved"
                )
            elif not item.message.startswith("could not be done"):
                self.audited[f"step.{job.action}"] += 1  # through the single action: audited

    @staticmethod
    def _untouched(step_pk: int) -> tuple[Any, ...]:
        """What a batch must not change on a step it refused."""
        step = Step.objects.get(pk=step_pk)
        return (
            step.state, step.pending_action, step.left_at, step.decided_by,
            step.attempts.count(), step.changed_at,
        )  # fmt: skip

    # ---------------------------------------------------------------- workers

    @precondition(lambda self: bool(QUEUE))
    @rule(data=st.data())
    def worker_runs(self, data: st.DataObject) -> None:
        """A worker takes one queued task and runs the real task function."""
        name, args = QUEUE.pop(data.draw(st.integers(0, len(QUEUE) - 1)))
        self._task_run(name, args, data)
        self._did("worker", self._saga_of(name, args))

    @precondition(lambda self: bool(QUEUE))
    @rule(data=st.data())
    def workers_catch_up(self, data: st.DataObject) -> None:
        """The workers run everything queued, and what that queues, oldest first, until
        only work a live agent's saga holds back is left (it is Busy while the agent is)."""
        busy = 0
        for _ in range(40):
            if not QUEUE or busy >= len(QUEUE):
                break
            name, args = QUEUE.pop(0)
            busy = 0 if self._task_run(name, args, data) else busy + 1
            self._did("worker", self._saga_of(name, args))

    def _task_run(self, name: str, args: tuple[Any, ...], data: st.DataObject) -> bool:
        """Run one task as a worker does; False if it is busy (the broker redelivers it)."""
        if name == jobs.BATCH_RUN:
            self._batch_run(args[0], cancel_midway=data.draw(st.booleans()))
            return True
        try:
            current_app.tasks[name].run(*args)
        except (Busy, Retry):
            QUEUE.append((name, args))  # the broker redelivers it after its countdown
            return False
        return True

    def _saga_of(self, name: str, args: tuple[Any, ...]) -> str:
        if _TASK_OF.get(name) == "saga":
            return Saga.objects.get(pk=args[0]).saga_id
        if _TASK_OF.get(name) == "step":
            return Step.objects.select_related("saga").get(pk=args[0]).saga.saga_id
        return ""

    def _did(self, what: str, saga_id: str) -> None:
        self.last = what
        if saga_id:
            self.touched.add(saga_id)

    # ---------------------------------------------------------------- the promises

    @invariant()
    def every_step_moved_as_its_plan_said(self) -> None:
        sagas = list(Saga.objects.filter(project=self.project).select_related("project"))
        by_step: dict[int, set[str]] = {}
        for pk, status in Approval.objects.filter(saga__project=self.project).values_list(
            "step_id", "status"
        ):
            by_step.setdefault(pk, set()).add(status)
        promises: dict[int, tuple[str, Facts]] = {}
        for saga in sagas:
            for line in work_queues.compensation_plan(saga):
                step: Step = line["step"]  # type: ignore[assignment]
                now = _facts(step, by_step)
                invoked = CALLS[step.idempotency_key] + AGENT_CALLS[step.idempotency_key]
                assert now[1] == invoked, (
                    f"{saga.saga_id}/{step.step_id}: {now[1]} attempts recorded as run, "
                    f"{invoked} calls of its undo"
                )
                said = self.promises.get(step.pk)
                if said is not None:
                    self._kept(saga, step, said[0], said[1], now)
                promises[step.pk] = (str(line["what"]), now)
        self.promises = promises

    def _kept(self, saga: Saga, step: Step, said: str, was: Facts, now: Facts) -> None:
        where = f"{saga.saga_id}/{step.step_id} ({step.tool_name}) after {self.last!r}: {said!r}"
        state, ran, not_run, approvals_now = now
        moved = now != was
        if said.startswith(("nothing to undo", "done:", "left failed")):
            assert not moved, f"{where} moved: {was} -> {now}"
        elif said == "will run unattended":
            assert StepState.AWAITING_APPROVAL not in (state,) and not_run == was[2], where
            assert ran >= was[1], where
            if state in (StepState.ROLLED_BACK, StepState.ROLLBACK_FAILED) and state != was[0]:
                assert ran > was[1], f"{where}: {state} without its undo running"
        elif said.startswith(("will need approval", "waits for approval")):
            if ran > was[1]:
                assert Approval.Status.APPROVED in approvals_now, f"{where}: ran unapproved"
            assert not_run == was[2], where
        elif said.startswith(("waits for an operator:", "cannot run here:")):
            assert ran == was[1], f"{where}: attempted although nothing here can run it"
            assert state != StepState.ROLLED_BACK, where
            if state != was[0]:
                assert state in (StepState.ROLLBACK_FAILED, StepState.RESOLVED), where
        elif said.startswith("runs in the agent"):
            if ran > was[1] or state != was[0]:
                assert self.last in ("agent", "agent_gone", "worker") or self.last.startswith(
                    "saga.stop"
                ), where
                if self.last == "worker":  # the agent let go before a worker got it
                    assert ran == was[1], f"{where}: a worker ran the agent's undo"
        elif said.startswith(("rollback failed: waits", "in doubt: waits")):
            if moved:
                assert self.last in ("worker", "step.resolve", "step.leave", "step.retry"), where
                assert not_run == was[2], f"{where}: a retry was let run on nothing"
        else:
            raise AssertionError(f"{where}: a plan line nobody checks")

    @invariant()
    def nobody_is_left_unable_to_act(self) -> None:
        queued = {self._saga_of(name, args) for name, args in QUEUE}
        for saga in Saga.objects.filter(project=self.project):
            if saga.saga_id in queued or saga.saga_id in self.agents:
                continue
            steps = list(saga.steps.all())
            if saga.status == SagaStatus.COMPENSATING:
                assert saga.approvals.filter(status=Approval.Status.PENDING).exists() or (
                    saga.rollback_request_pending
                ), f"{saga.saga_id} is COMPENSATING and nobody can move it: {steps}"
            if saga.status == SagaStatus.ROLLBACK_FAILED:
                stuck = [
                    s
                    for s in steps
                    if s.state in (StepState.ROLLBACK_FAILED, StepState.IN_DOUBT)
                    and s.left_at is None
                ]
                assert stuck or saga.waiting_for is None, saga.saga_id
                if stuck:
                    assert saga.waiting_for == "OPERATOR", (saga.saga_id, saga.waiting_for)

    @invariant()
    def every_batch_job_keeps_its_word(self) -> None:
        for job in BatchJob.objects.filter(pk__in=self.batches):
            where = f"batch {job.pk} ({job.action}, {job.state}) after {self.last!r}"
            counts = item_counts(job.pk)
            assert job.counts == counts, f"{where}: counts {job.counts}, items {counts}"
            assert job.done == sum(counts.values()), where
            if job.state == BatchJob.State.FINISHED:
                assert job.done == job.total, where
            if job.state in ENDED:
                assert "requested" not in counts, f"{where}: ended with items running"
            elif not QUEUE:
                running = list(
                    BatchItem.objects.filter(job=job, outcome="requested").values_list(
                        "label", "message"
                    )
                )
                raise AssertionError(f"{where}: stuck once every task has run: {running}")
            ends = Counter(
                AuditEntry.objects.filter(target=f"batch:{job.pk}").values_list("action", flat=True)
            )
            assert ends["batch.start"] == 1, (where, ends)
            assert ends["batch.cancel"] == bool(job.cancelled_by), (where, ends)
            # One end, with its final counts; a job cancelled before a worker took it ended
            # with its cancel (it has acted on nothing).
            ended = job.state in ENDED and job.started_at is not None
            assert ends["batch.finish"] + ends["batch.cancelled"] == ended, (where, ends)
            if job.started_at is None:
                assert job.done == 0, where
        settled = BatchItem.objects.filter(job_id__in=self.batches).exclude(
            outcome__in=["", "requested"]
        )
        for item in settled.exclude(pk__in=self.outcomes_checked).select_related("job"):
            self._outcome_agrees(item)
            self.outcomes_checked.add(item.pk)

    def _outcome_agrees(self, item: BatchItem) -> None:
        """A settled item's outcome is what its step came to (checked when it settles: the
        step may be acted on again later)."""
        step = Step.objects.get(pk=item.target_pk)
        where = f"{item.label} of batch {item.job_id} ({item.job.action}): {item.outcome}"
        event(f"batch {item.job.action}: item {item.outcome}")  # --hypothesis-show-statistics
        assert item.message, f"{where} without a why"
        if item.outcome == "refused":
            return  # checked against the step as it was when the worker ran it
        if item.outcome == "succeeded":
            wanted = {"retry": StepState.ROLLED_BACK, "resolve": StepState.RESOLVED}
            assert step.state == wanted[item.job.action], f"{where}, the step is {step.state}"
        else:
            assert item.outcome == "failed", where
            failed = (StepState.ROLLBACK_FAILED, StepState.IN_DOUBT)
            assert step.state in failed, f"{where}, the step is {step.state}"

    @invariant()
    def every_view_of_a_touched_saga_agrees(self) -> None:
        for saga_id in sorted(self.touched):
            saga = Saga.objects.get(project=self.project, saga_id=saga_id)
            view = self.api.get(f"/api/v1/sagas/{saga_id}").json()
            assert view["status"] == saga.status, saga_id
            assert {s["id"]: s["state"] for s in view["steps"]} == dict(
                saga.steps.values_list("step_id", "state")
            )
            page = self.viewer.get(f"/sagas/chains/{saga_id}/")
            assert page.status_code == 200
            assert html.escape(saga.status_badge) in page.content.decode(), saga_id
            rows = self.viewer.get("/", {"q": saga_id}).content.decode()
            assert f"/sagas/chains/{saga_id}/" in rows and html.escape(saga.status_badge) in rows
            report = verify.verify(project="chains", saga_id=saga_id)
            assert not report.differences, report.differences
        self.touched.clear()
        counted = Counter(
            AuditEntry.objects.filter(
                project=self.project, action__in=list(self.audited)
            ).values_list("action", flat=True)
        )
        assert counted == self.audited

    def teardown(self) -> None:
        for engine in self.agents.values():
            engine.release()
        QUEUE.clear()


def test_the_plan_is_a_promise_over_random_chains_of_actions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(jobs, "enqueue_now", _enqueue)
    # Jobs of a few items in several chunks: a cancel can come between two of them.
    monkeypatch.setattr(django_settings, "SAGABOARD_BATCH_CHUNK", 1)
    profile = settings.get_profile(os.environ.get("SAGABOARD_CHAIN_PROFILE", "chains-ci"))
    run_state_machine_as_test(Chains, settings=profile)


_BUDGET = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}
settings.register_profile(
    "chains-ci",
    max_examples=int(os.environ.get("SAGABOARD_CHAIN_EXAMPLES", "8")),
    stateful_step_count=int(os.environ.get("SAGABOARD_CHAIN_STEPS", "14")),
    **_BUDGET,
)
"""CI's budget on each database: about a minute on SQLite."""
settings.register_profile("chains-long", max_examples=300, stateful_step_count=40, **_BUDGET)
"""``SAGABOARD_CHAIN_PROFILE=chains-long``: the long run, outside CI (tens of minutes)."""

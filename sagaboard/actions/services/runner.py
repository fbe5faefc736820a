"""Compensations of the sagas sagaboard runs, carried out by a worker with undo_core's engine.

The worker restores the saga from ``DjangoStore`` under a lease (one worker
per saga at a time; a dead worker's lease is taken over), gives the engine
tools whose undo runs the step's server-side kind, and a gate whose answers
come from the approval table. Every transition, attempt and decision goes
through the engine's own state machine, so the rules are the ones the agent's
in-process sagas follow. An undo gets the step's idempotency key: an attempt
interrupted by a crash is run again with the same key.

A task reads the saga, its steps and the policies once (``TaskRows``), and its store
knows the saga from those rows (its transitions read nothing again). What guards an
undo is read right before it runs: the step at the gate and the approval that stands
(by the gate, which the undo then goes by; on any other way there, by the undo).
``tests/sagaboard/approvals/test_approval_queries.py`` pins the count.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from sagaboard.actions.services import batch_outcomes, saga_stop
from sagaboard.approvals.services import approvals
from sagaboard.audit.services import audit
from sagaboard.engine.reads import rollback_outcomes
from sagaboard.engine.services import undo_kinds
from sagaboard.engine.services.worker_store import Busy, WorkerStore
from sagaboard.infra.logs import saga_context
from sagaboard.infra.observed_time import unchanged_for
from sagaboard.models import Approval, ApprovalPolicy, Saga, Step
from undo_core import (
    ApprovalRequest,
    Decision,
    FailedCompensation,
    LeaseError,
    SagaStatus,
    StepState,
    Tool,
    UndoContext,
    default_owner,
    define_tool,
    local_owner_dead,
)
from undo_core import Saga as EngineSaga

log = logging.getLogger("sagaboard.actions.services.runner")


class TaskRows:
    """What one task reads once: the saga's steps (with attempts) and the enabled policies.

    Read once, so the approval round trip does not read the step and the policies again
    at each stage before an undo starts. The policies are read again after each undo (which
    may take a while), so a policy switched on during a long rollback still applies
    to the undos after it.
    """

    def __init__(self, saga: Saga) -> None:
        self.saga = saga
        self.steps = {s.step_id: s for s in saga.steps.prefetch_related("attempts")}
        self._policies: list[ApprovalPolicy] | None = None
        self.approved: dict[str, Approval] = {}
        """The approval the gate has just let each step's undo run on, until that undo starts."""

    def policies(self) -> list[ApprovalPolicy]:
        if self._policies is None:
            self._policies = approvals.policies_enabled(self.saga.project)
        return self._policies

    def forget_policies(self) -> None:
        self._policies = None

    def step(self, step_id: str) -> Step:
        row = self.steps.get(step_id)
        return row if row is not None else Step.objects.get(saga=self.saga, step_id=step_id)

    def approval_reason(self, step: Step) -> str | None:
        return approvals.approval_reason(self.saga.project, step, self.policies())


def _forward_not_here(*args: Any) -> Any:
    raise RuntimeError("a saga's forward steps do not run in sagaboard's workers")


class ServerGate:
    """undo_core's gate for sagas sagaboard runs: decisions come from people, via the DB."""

    def __init__(self, saga: Saga, rows: TaskRows | None = None) -> None:
        self.saga = saga
        self.rows = rows or TaskRows(saga)

    def approve_compensation(self, request: ApprovalRequest) -> Decision:
        # The step as it is now (not the task's copy): the approval is for what is
        # stored; the undo then checks what it would run against what was approved.
        step = Step.objects.get(saga=self.saga, step_id=request.step.id)
        why = self.rows.approval_reason(step) or request.why
        approval = approvals.approval_open(self.saga, step, why, policies=self.rows.policies())
        if approval.status == Approval.Status.PENDING:
            return Decision.wait(reason="waiting for an approver")
        voters = ", ".join(audit.actor_of(v.user) for v in approval.votes.select_related("user"))
        if approval.status == Approval.Status.APPROVED:
            self.rows.approved[step.step_id] = approval
            return Decision.approve(actor=voters or None, reason=approval.decided_reason)
        if approval.status in (Approval.Status.REJECTED, Approval.Status.EXPIRED):
            return Decision.reject(
                approval.decided_reason or approval.status.lower(), actor=voters or "system"
            )
        return Decision.wait(reason="waiting for an approver")

    def compensation_failed(self, request: FailedCompensation) -> Decision:
        return Decision.leave(reason="left for an operator: retry, resolve or leave it failed")


@contextmanager
def _lease_kept(saga: Saga, owner: str) -> Iterator[None]:
    """Renew the worker's lease while an undo runs, however long it takes.

    The engine renews only when it writes; an undo that outlasted the lease would
    look orphaned and be run a second time, at once, by another worker.
    """
    seconds = settings.SAGABOARD_WORKER_LEASE_SECONDS
    stop = threading.Event()

    def renew() -> None:
        try:
            while not stop.wait(seconds / 3):
                Saga.objects.filter(pk=saga.pk, lease_owner=owner).update(
                    lease_expires_at=timezone.now() + timedelta(seconds=seconds)
                )
        finally:
            connection.close()  # this thread's own connection

    keeper = threading.Thread(target=renew, name=f"lease-{saga.saga_id}", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join()


def _approved_hash(saga: Saga, step: Step, rows: TaskRows) -> str | None:
    """The plan hash a person approved for this undo; None when it needs no approval.

    Read again right before the undo runs (the engine does not ask the gate again
    on an operator's retry): an undo that needs approval and has none that
    stands is refused, whatever path reached it.
    """
    if rows.approval_reason(step) is None:
        return None
    # The approval the gate has just read and let this undo run on still stands: only the
    # undo's own COMPENSATING write came between, under the lease (nobody else asks for
    # this saga's approvals, and only a PENDING one expires or is decided); what would
    # run is still checked against its plan. Any other way here (a retry) reads it.
    current = rows.approved.pop(step.step_id, None) or approvals.approval_current(step)
    if current is None or current.status != Approval.Status.APPROVED:
        message = "refused: this undo needs approval and none stands for what would run"
        _refused(saga, step, message, rows)
        raise undo_kinds.PlanChanged(message)
    return current.plan_hash


def _refused(saga: Saga, step: Step, message: str, rows: TaskRows) -> None:
    """Audit the refusal, and ask a person about what would run now (voiding the stale one)."""
    log.warning("%s", message)
    audit.record(
        user=None, actor="worker", action="undo.refused", saga=saga, step=step,
        reason=message, to_state=step.state,
    )  # fmt: skip
    fresh = Step.objects.get(pk=step.pk)
    why = rows.approval_reason(fresh) or ""
    approvals.approval_open(saga, fresh, why, policies=rows.policies())


def _tools(
    saga: Saga, rows: TaskRows, store: WorkerStore, outputs: dict[str, str], owner: str
) -> dict[str, Tool]:
    steps = rows.steps

    def undo(output: Any, input: Any, ctx: UndoContext) -> None:
        if not store.lease_taken:  # cannot happen: an undo starts after a write took it
            raise LeaseError(f"refused: the undo of {ctx.step_id} would run without the lease")
        step = steps[ctx.step_id]
        with saga_context(saga.saga_id, ctx.step_id), _lease_kept(saga, owner):
            log.info("undo attempt %s starts (key %s)", ctx.attempt, ctx.idempotency_key)
            try:
                approved = _approved_hash(saga, step, rows)
                try:
                    outputs[ctx.step_id] = undo_kinds.run(saga, step, ctx, approved_hash=approved)
                except undo_kinds.PlanChanged as refused:
                    _refused(saga, step, str(refused), rows)
                    raise
            finally:
                rows.forget_policies()  # the next step's undo reads them afresh
            log.info("undo attempt %s succeeded", ctx.attempt)

    # Every tool gets the one undo, which runs each step's own kind (by ``ctx.step_id``):
    # whether a step has an undo is the step's ``has_undo``, and whether it can run here
    # is ``undo_kinds.undo_check``, asked by ``undo_kinds.run`` (and by the plan people read).
    # An undo that lives in the agent is never attempted: the engine records why, in words.
    tools: dict[str, Tool] = {}
    for s in steps.values():
        runner = undo_kinds.undo_runner(s.has_undo, s.undo)
        if runner is undo_kinds.UndoRunner.AGENT and s.tool_name not in tools:
            elsewhere = undo_kinds.AGENT_GONE.format(tool=s.tool_name)
            tools[s.tool_name] = replace(
                define_tool(s.tool_name, _forward_not_here), undo_elsewhere=elsewhere
            )
        elif runner is not undo_kinds.UndoRunner.AGENT:
            tools[s.tool_name] = define_tool(s.tool_name, _forward_not_here, undo)
    return tools


@contextmanager
def attached(saga: Saga, *, lazy_lease: bool = False) -> Iterator[EngineSaga]:
    """The saga in the engine, held under this worker's lease until the block ends.

    ``lazy_lease``: take the lease with the engine's first write instead of at once
    (one commit fewer before an approved undo starts; see
    ``sagaboard.engine.services.worker_store``).
    Nothing is held until then, and a worker that lost the saga to another one in
    between gets ``Busy`` from that write, having done nothing.
    """
    outputs: dict[str, str] = {}
    rows = TaskRows(saga)
    store = WorkerStore(saga, list(rows.steps.values()), lazy_lease=lazy_lease)
    # host:pid first, so recovery can tell at once when this worker has died.
    owner = f"{default_owner()}:worker"

    def needs_approval(snapshot: Any) -> bool:
        return rows.approval_reason(rows.step(snapshot.id)) is not None

    try:
        engine = EngineSaga.restore(
            store,
            saga.saga_id,
            _tools(saga, rows, store, outputs, owner),
            owner=owner,
            lease_seconds=settings.SAGABOARD_WORKER_LEASE_SECONDS,
            gate=ServerGate(saga, rows),
            approval_policy=needs_approval,
        )
    except LeaseError as err:
        raise Busy(str(err)) from err
    try:
        with saga_context(saga.saga_id):
            yield engine
    finally:
        engine.release()
        for step_id, text in outputs.items():
            if text:
                step = Step.objects.get(saga=saga, step_id=step_id)
                audit.record(
                    user=None, actor="worker", action="undo.output", saga=saga, step=step,
                    reason=text[: undo_kinds.OUTPUT_CAP + 200], to_state=step.state,
                )  # fmt: skip


def rollback_continue(saga_pk: int) -> str:
    """Run (or go on with) a server-run saga's rollback as far as decisions allow."""
    saga = Saga.objects.select_related("project").get(pk=saga_pk)
    if saga.driver != Saga.Driver.SERVER:
        return "run by its agent"
    if saga.status not in (SagaStatus.COMPENSATING, SagaStatus.ROLLBACK_FAILED):
        return f"nothing to do: {saga.status}"
    try:
        with attached(saga, lazy_lease=True) as engine:
            engine.resume_rollback()
            return str(engine.status)
    finally:
        _task_ended(saga)


def _task_ended(saga: Saga) -> None:
    """After a task on the saga: no approval is left pending for a step that settled, and
    the saga's ``waiting_for`` counts a retry still waiting for its approver (the engine's
    writes know the step only as ROLLBACK_FAILED)."""
    if approvals.approvals_void_settled(saga.pk) or rollback_outcomes.retry_awaits_approval(
        saga.pk
    ):
        rollback_outcomes.refresh(Saga.objects.get(pk=saga.pk))


def stop_run(saga_pk: int) -> str:
    """Carry out an operator's request to roll back a running saga sagaboard runs.

    The engine's own transitions: ``begin_rollback`` (steps never marked completed
    fail, the saga goes COMPENSATING), then the undos newest first, each under its
    approval rules. ``Busy`` (an API call or another worker holds it): the request
    stays, and the sweep picks it up again (``orphaned_work``).
    """
    saga = Saga.objects.select_related("project", "rollback_requested_by").get(pk=saga_pk)
    if saga.driver != Saga.Driver.SERVER or not saga.rollback_request_pending:
        return "nothing requested"
    by = audit.actor_of(saga.rollback_requested_by)
    if saga.status == SagaStatus.IN_PROGRESS:
        with attached(saga) as engine:
            engine.begin_rollback(actor=by)
            engine.resume_rollback(actor=by)
            status = str(engine.status)
    else:
        status = saga.status
    saga_stop.requests_closed(saga.project, [saga.saga_id])
    return status


def step_action_run(step_pk: int) -> str:
    """Carry out an operator's pending retry or resolve, then go on with the rollback.

    A retry of an undo that needs approval, with none that stands for what would run, is
    not attempted: it waits for the approval (``_retry_gate``), and the decision brings
    the worker back here (``approvals._after_decision``) to run it or to end it.
    """
    step = Step.objects.select_related("saga__project").get(pk=step_pk)
    request = step.pending_action
    if not request:
        return "nothing pending"
    saga, by = step.saga, request.get("by")
    failed = (StepState.ROLLBACK_FAILED, StepState.IN_DOUBT)
    if request["action"] == "retry" and step.state in failed:
        waits = _retry_gate(saga, step, request)
        if waits:
            return waits
    try:
        return _step_action_attached(saga, step, request, by, failed)
    finally:
        _task_ended(saga)


def _retry_gate(saga: Saga, step: Step, request: dict[str, Any]) -> str:
    """'' when the retry may run now; else why not, with the request waiting or ended.

    The retry runs as the operator who asked for it (their name is on the attempt); the
    approvers are on the approval and its audit entries. No failed attempt is recorded
    for a retry that could not run: the step stays as it was, waiting for the approver
    (the saga's ``waiting_for`` is APPROVAL), or, once an approver rejected it, for an
    operator's resolve or leave.
    """
    why = approvals.approval_reason(saga.project, step)
    if why is None:
        return ""
    approval = approvals.approval_open(saga, step, why)
    if approval.status == Approval.Status.APPROVED:
        return ""
    if approval.status == Approval.Status.PENDING:
        waiting = {**request, "approval": approval.pk, "why": why}
        with transaction.atomic():
            if request != waiting and Step.objects.filter(
                pk=step.pk, pending_action=request
            ).update(pending_action=waiting):
                audit.record(
                    user=None, actor="worker", action="step.retry_waits", saga=saga,
                    step=step, reason=f"the retry waits for approval #{approval.pk}: {why}",
                    from_state=step.state, to_state=step.state,
                    data={"approval": approval.pk, "requested_by": request.get("by")},
                )  # fmt: skip
            rollback_outcomes.refresh(Saga.objects.select_for_update().get(pk=saga.pk))
        return "waiting for approval"
    said = approval.decided_reason or approval.status.lower()
    with transaction.atomic():
        if Step.objects.filter(pk=step.pk, pending_action=request).update(pending_action=None):
            audit.record(
                user=None, actor="worker", action="step.retry_rejected", saga=saga, step=step,
                reason=f"the approver rejected the retry: {said}", from_state=step.state,
                to_state=step.state, data={"approval": approval.pk},
            )  # fmt: skip
        rollback_outcomes.refresh(Saga.objects.select_for_update().get(pk=saga.pk))
    batch_outcomes.requests_settle(step_pks=[step.pk], carried_out=True)
    return "rejected"


def _step_action_attached(
    saga: Saga, step: Step, request: dict[str, Any], by: str | None, failed: tuple[str, ...]
) -> str:
    with attached(saga) as engine:  # Busy (another worker holds it): the request stays
        try:
            state = engine.step(step.step_id).state
            if state is StepState.COMPENSATING:
                engine.resume_rollback(actor=by)  # redelivered after a crash: finish it
            elif request["action"] == "retry" and state in failed:
                engine.retry_compensation(step.step_id, actor=by)
            elif request["action"] == "resolve" and state in failed:
                engine.resolve(step.step_id, request["reason"], actor=by)
            settled = engine.step(step.step_id).state in (StepState.ROLLED_BACK, StepState.RESOLVED)
            if settled and engine.status in (SagaStatus.ROLLBACK_FAILED, SagaStatus.COMPENSATING):
                engine.resume_rollback(actor=by)  # the rest of a halted rollback goes on
            return str(engine.step(step.step_id).state)
        finally:
            Step.objects.filter(pk=step.pk).update(pending_action=None)
            # Still under the saga's lease: the step is what this request did (a batch
            # job's item for it gets that outcome now, before another request can run).
            batch_outcomes.requests_settle(step_pks=[step.pk], carried_out=True)


def orphaned_work(*, stale_seconds: float = 30.0) -> list[tuple[str, int]]:
    """Work whose task was lost (a worker killed with its queue): ("saga"|"step"|"stop", pk).

    A server-run saga left COMPENSATING with no live lease and no approval pending, an
    operator's request still pending after ``stale_seconds`` on a saga nobody holds, and
    a stop request left that long; at once, any saga whose lease holder is a process of
    this host that has died (a worker SIGKILLed mid-undo). Picking one up twice is
    harmless: the lease lets one worker in, and the state says whether anything is left.

    The wall clock is trusted only where it cannot cause a second run. A lease lapsed
    by it while its holder may be alive (the clock stepped forward), and a stored time
    in the future (the clock stepped back), count only once the sweep has seen the row
    unchanged for ``stale_seconds`` and a lease's length by this host's monotonic clock
    (``sagaboard.infra.observed_time``): a live holder renews its lease well before that.
    A lease set further ahead than a lease lasts (before the clock went back) is cut to
    one lease from now, so that a dead holder's lapses on time.
    """
    now = timezone.now()
    lease = timedelta(seconds=settings.SAGABOARD_WORKER_LEASE_SECONDS)
    cutoff = now - timedelta(seconds=stale_seconds)
    watch = max(stale_seconds, lease.total_seconds())
    Saga.objects.filter(
        driver=Saga.Driver.SERVER, lease_owner__isnull=False, lease_expires_at__gt=now + lease
    ).update(lease_expires_at=now + lease)

    def seen_still(key: str, *fingerprint: object) -> bool:
        return unchanged_for(key, repr(fingerprint)) >= watch

    dead = _held_by_the_dead()
    sagas = _sagas_orphaned(now, cutoff, dead, seen_still)
    stale_steps = _requests_orphaned(now, cutoff, dead, seen_still)
    stops = _stops_orphaned(now, cutoff, seen_still)
    dead_steps = list(
        Step.objects.filter(saga_id__in=dead, pending_action__isnull=False).values_list(
            "pk", flat=True
        )
    )
    return (
        [("saga", pk) for pk in [*sagas, *dead]]
        + [("step", pk) for pk in [*stale_steps, *dead_steps]]
        + [("stop", pk) for pk in stops]
    )


# The parts of ``orphaned_work``, one kind of lost work each, so the sweep reads as its
# list of kinds. ``seen_still(key, *fingerprint)``: the row was seen unchanged long enough
# for the wall clock not to matter (its docstring says when that counts).
SeenStill = Callable[..., bool]


def _held_by_the_dead() -> list[int]:
    """Sagas whose lease holder is a process of this host that has died: picked up at once."""
    held = Saga.objects.filter(
        driver=Saga.Driver.SERVER,
        status__in=[SagaStatus.COMPENSATING, SagaStatus.ROLLBACK_FAILED],
        lease_owner__isnull=False,
    ).values_list("pk", "lease_owner")[:200]
    return [pk for pk, owner in held if local_owner_dead(owner)]


def _sagas_orphaned(
    now: datetime, cutoff: datetime, dead: list[int], seen_still: SeenStill
) -> list[int]:
    """Server-run sagas left COMPENSATING with no live lease and no approval pending."""
    candidates = (
        Saga.objects.filter(driver=Saga.Driver.SERVER, status=SagaStatus.COMPENSATING)
        .filter(Q(lease_owner__isnull=True) | Q(lease_expires_at__lt=now))
        .filter(Q(changed_at__lt=cutoff) | Q(changed_at__gt=now))
        .exclude(approvals__status=Approval.Status.PENDING)
        .exclude(pk__in=dead)
        .values_list("pk", "seq", "changed_at", "lease_owner", "lease_expires_at")[:100]
    )
    return [
        pk
        for pk, seq, changed, owner, expires in candidates
        if (owner is None and changed < now) or seen_still(f"saga:{pk}", seq, owner, expires)
    ]


def _requests_orphaned(
    now: datetime, cutoff: datetime, dead: list[int], seen_still: SeenStill
) -> list[int]:
    """Steps whose operator's request has been pending since before ``cutoff`` on a saga
    nobody holds (a dead holder's are picked up apart, at once)."""
    requests = (
        Step.objects.filter(
            Q(saga__lease_owner__isnull=True) | Q(saga__lease_expires_at__lt=now),
            pending_action__isnull=False,
            saga__driver=Saga.Driver.SERVER,
        )
        .exclude(saga_id__in=dead)
        .exclude(approvals__status=Approval.Status.PENDING)  # a retry waits for its approver
        .values_list("pk", "pending_action", "saga__lease_owner", "saga__lease_expires_at")[:100]
    )
    early, late = cutoff.isoformat(), now.isoformat()
    return [
        pk
        for pk, request, owner, expires in requests
        if ((at := (request or {}).get("at", "")) < early and owner is None)
        or (not early <= at <= late and seen_still(f"step:{pk}", at, owner, expires))
    ]


def _stops_orphaned(now: datetime, cutoff: datetime, seen_still: SeenStill) -> list[int]:
    """Sagas whose stop request has been left undone since before ``cutoff``."""
    asked = Saga.objects.filter(
        Q(rollback_requested_at__lt=cutoff) | Q(rollback_requested_at__gt=now),
        driver=Saga.Driver.SERVER,
        rollback_request_done_at__isnull=True,
    ).values_list("pk", "rollback_requested_at")[:100]
    return [pk for pk, at in asked if at < now or seen_still(f"stop:{pk}", at)]

"""What a batch job's items came to: each request followed to the end of the undo it started.

A batch job asks; a worker (sagas sagaboard runs) or the agent's SDK (sagas it runs)
carries out. So an item whose retry, resolve or approval was accepted is ``requested``
(still running) until the undo that request started has ended, then what it came to:
``succeeded`` (undone, or resolved), ``failed`` (failed again, with the error) or
``refused`` (skipped, with why). A job whose requests are all made stays ``finishing``
until the last of them has an outcome, then ``finished`` (or ``cancelled``, if it was).

An item's result is read from its step as it now stands (``result_of``), for all of a
job's running items in one query, and stored once known (``requests_settle``):

- when the request is carried out: ``runner.step_action_run`` ends (sagas sagaboard
  runs), the agent acknowledges it (``decisions.decision_ack``); then, for that step;
- when the job page polls, the API reads the job, the worker ends the job, and every
  sweep (``jobs_settle``: an approval's undo, run by ``rollback_continue`` or the agent,
  and whatever a crash left), for the job's items.

Exact because a step holds at most one request at a time (``operator_actions``): while the
step's request is pending, it is the item's; once it is carried out, the step is what that
request did, and the item is settled right then (the worker: still under the saga's lease, so
no other request's undo can have started; the agent: as its acknowledgement commits).
A settled item never changes again. What one read costs does not grow with the job: one
query for its running items (with their steps), one update for those that ended.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    Exists,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.utils import timezone

from sagaboard.infra import permalinks
from sagaboard.models import Approval, AuditEntry, BatchItem, BatchJob, Step
from sagaboard.models.fields import JSONTextField
from undo_core import CARRIED_OUT, DecisionAction, StepState

State = BatchJob.State
REQUESTED = "requested"
NOT_STARTED = "pending"
"""The job page's key (``?outcome=pending``) for items not acted on yet."""

PUBLIC = {
    "succeeded": "succeeded",
    "failed": "failed_again",
    "refused": "skipped",
    REQUESTED: "running",
    "waiting": "waiting_for_approver",
    NOT_STARTED: "not_started",
}
"""Each stored outcome and its name in the API (``totals``, an item's ``result``)."""
SUCCEEDED: dict[str, str] = {
    DecisionAction.RETRY: "undone",
    DecisionAction.APPROVE: "undone",
    DecisionAction.RESOLVE: "resolved by hand",
    DecisionAction.LEAVE: "left failed",
    DecisionAction.REJECT: "rejected",
}
"""What "succeeded" means for each action, in the words of the job page."""
_FAILED_WORDS: dict[str, str] = {
    DecisionAction.RETRY: "failed again",
    DecisionAction.APPROVE: "undo failed",
}

_FAILED = (StepState.ROLLBACK_FAILED, StepState.IN_DOUBT)
_NOT_ENDED = (
    StepState.PENDING,
    StepState.COMPLETED,
    StepState.AWAITING_APPROVAL,
    StepState.COMPENSATING,
)
"""A step in one of these has not ended the undo asked for (an approved one not run yet)."""
_MAX_MESSAGE = 2000


def labels(action: str) -> dict[str, str]:
    """Each outcome (stored key; ``pending``: not started) in the job page's words."""
    return {
        "succeeded": SUCCEEDED.get(action, "succeeded"),
        "failed": _FAILED_WORDS.get(action, "failed"),
        "refused": "skipped",
        REQUESTED: "still running",
        "waiting": "waiting for another approver",
        NOT_STARTED: "not started yet",
    }


def shown_outcomes(action: str) -> list[str]:
    """The outcomes the job page counts for ``action``, in order."""
    keys = ["succeeded", "failed", "refused", REQUESTED]
    return [*keys, "waiting"] if action == "approve" else keys


# ---------------------------------------------------------------- an item's result


def result_of(
    action: str,
    state: str | None,
    error: str | None,
    pending: Any,
    *,
    carried_out: bool = False,
    left: bool = False,
    approval: str | None = None,
) -> tuple[str, str] | None:
    """The final (outcome, detail) of a requested item, from its step as it now stands;
    ``None`` while the undo its request started has not ended.

    ``pending``: the step's ``pending_action`` (the item's own request while it is set:
    a retry waiting for its approval is still running); ``carried_out``: the request was
    just carried out (a newer one may be pending already); ``left``: an operator left the
    step failed; ``approval``: the status of the step's approval that stands, if any.
    """
    if state is None:
        return "refused", "skipped: the step was deleted before its undo's outcome was known"
    if state == StepState.COMPENSATING or (pending and not carried_out):
        return None
    why = f": {error}" if error else ""
    if action in CARRIED_OUT and state in _FAILED:
        if left:
            return "refused", f"skipped: the step was left failed instead ({action} not run)"
        if action == "retry" and approval in (Approval.Status.REJECTED, Approval.Status.EXPIRED):
            return "refused", "skipped: the approver rejected the retry (no undo ran)"
    if action == "approve":
        if state in _NOT_ENDED:
            return None
        if state == StepState.ROLLED_BACK:
            return "succeeded", "approved, and the undo ran: ROLLED_BACK"
        if state in _FAILED:
            return "failed", f"approved, but the undo failed: the step is {state}{why}"
        return "refused", f"skipped: approved, but the undo did not run (the step is {state})"
    if state == StepState.ROLLED_BACK:
        return "succeeded", "the undo ran again: ROLLED_BACK"
    if state == StepState.RESOLVED:
        if action == "resolve":
            return "succeeded", "resolved by hand: RESOLVED"
        return "refused", "skipped: the step was resolved by hand instead of retried"
    if state in _FAILED:
        if action == "retry":
            return "failed", f"the undo failed again: the step is {state}{why}"
        return "failed", f"the {action} was not carried out: the step is still {state}{why}"
    return "refused", f"skipped: the step is {state}, nothing for the {action} to do"


def _running(items: QuerySet[BatchItem], *, carried_out: bool) -> QuerySet[Any]:
    """``items`` (requested ones) with their step's state, error and pending request, in
    one query: only those whose step has ended the undo (or is gone), unless ``carried_out``
    says its pending request is done."""
    approval_step = Approval.objects.filter(pk=OuterRef("target_pk")).values("step_id")[:1]
    step_ref = Case(
        When(kind=BatchItem.Kind.STEP, then=F("target_pk")),
        default=Subquery(approval_step),
        output_field=BigIntegerField(),
    )
    step = Step.objects.filter(pk=OuterRef("step_ref"))
    standing = Approval.objects.filter(step_id=OuterRef("step_ref")).exclude(
        status=Approval.Status.VOID
    )
    rows = items.alias(step_ref=step_ref).annotate(
        step_state=Subquery(step.values("state")[:1]),
        step_error=Subquery(step.values("error")[:1]),
        step_pending=Subquery(step.values("pending_action")[:1], output_field=JSONTextField()),
        step_left=Exists(step.filter(left_at__isnull=False)),
        step_approval=Subquery(standing.order_by("-pk").values("status")[:1]),
    )
    if not carried_out:  # a step still pending or not ended: nothing to read, skip the row
        ended = Q(step_state__isnull=True) | ~Q(step_state__in=_NOT_ENDED)
        rows = rows.filter(ended, step_pending__isnull=True)
    return rows.values(
        "pk", "job_id", "job__action", "step_state", "step_error", "step_pending", "step_left",
        "step_approval",
    )  # fmt: skip


def requests_settle(
    *,
    job_pks: Iterable[int] = (),
    step_pks: Sequence[int] = (),
    finishing: bool = False,
    carried_out: bool = False,
) -> int:
    """Store the outcome of every requested item whose undo has ended; returns how many.

    The items of the jobs ``job_pks``, of every ``finishing`` job, or (``step_pks``) on
    those steps, whose request was just carried out (``carried_out``). Then each job with
    no item left running finishes (``finishing`` ones; see ``job_finish``).
    """
    job_pks = list(job_pks)
    items = BatchItem.objects.filter(outcome=REQUESTED)
    if step_pks:
        items = items.filter(kind=BatchItem.Kind.STEP, target_pk__in=list(step_pks))
    elif finishing:
        items = items.filter(job__state=State.FINISHING)
    else:
        items = items.filter(job_id__in=job_pks)
    now = timezone.now()
    settled: list[BatchItem] = []
    touched: set[int] = set(job_pks)
    for row in _running(items, carried_out=carried_out):
        found = result_of(
            row["job__action"], row["step_state"], row["step_error"], row["step_pending"],
            carried_out=carried_out, left=row["step_left"], approval=row["step_approval"],
        )  # fmt: skip
        if found is None:
            continue
        outcome, detail = found
        settled.append(BatchItem(pk=row["pk"], outcome=outcome, message=detail[:_MAX_MESSAGE],
                                 done_at=now))  # fmt: skip
        touched.add(row["job_id"])
    if settled:
        with transaction.atomic():
            # Only over items still requested: a result, once stored, is never replaced.
            BatchItem.objects.filter(outcome=REQUESTED).bulk_update(
                settled, ["outcome", "message", "done_at"], batch_size=500
            )
            for pk in sorted(touched):  # counted under the job's lock (a chunk holds it)
                if BatchJob.objects.select_for_update().filter(pk=pk).exists():
                    BatchJob.objects.filter(pk=pk).update(counts=item_counts(pk))
    if finishing:
        touched |= set(_finishing_done())
    for pk in touched:
        job_finish(pk)
    return len(settled)


def jobs_settle() -> int:
    """The sweep's part: every finishing job's items read again; returns how many settled."""
    return requests_settle(finishing=True)


def _finishing_done() -> QuerySet[Any]:
    still = BatchItem.objects.filter(job_id=OuterRef("pk"), outcome=REQUESTED)
    done = BatchJob.objects.filter(state=State.FINISHING).exclude(Exists(still))
    return done.values_list("pk", flat=True)[:500]


def item_counts(job_pk: int) -> dict[str, int]:
    """Items per outcome (those acted on), from the items themselves."""
    rows = BatchItem.objects.filter(job_id=job_pk).exclude(outcome="").values("outcome")
    return {r["outcome"]: r["n"] for r in rows.annotate(n=Count("pk")).order_by()}


def job_finish(job_pk: int) -> bool:
    """A finishing job with no item left running becomes finished (cancelled, if it was),
    with its final counts and audit entry; False if it is not (yet) one."""
    still = BatchItem.objects.filter(job_id=OuterRef("pk"), outcome=REQUESTED)
    final = Case(When(cancelled_by="", then=Value(State.FINISHED)), default=Value(State.CANCELLED))
    with transaction.atomic():
        ended = (
            BatchJob.objects.filter(pk=job_pk, state=State.FINISHING)
            .exclude(Exists(still))
            .update(state=final, finished_at=timezone.now())
        )
        if ended:
            counts = item_counts(job_pk)
            BatchJob.objects.filter(pk=job_pk).update(counts=counts)
            job = BatchJob.objects.get(pk=job_pk)
            job_audit(job, ended_action(job.state), project_pks(job),
                      {"counts": counts, "done": sum(counts.values())})  # fmt: skip
    return bool(ended)


def ended_action(state: str) -> str:
    return "batch.finish" if state == State.FINISHED else "batch.cancelled"


def job_current(job: BatchJob) -> BatchJob:
    """``job`` with what its running items came to stored first (a page or API read)."""
    if job.running or job.state == State.FINISHING:
        requests_settle(job_pks=[job.pk])
        job.refresh_from_db()
    return job


# ---------------------------------------------------------------- audit


def job_audit(job: BatchJob, action: str, pks: Sequence[int], data: dict[str, Any]) -> None:
    """One entry per project the job touches (each project's admins see it on their audit page)."""
    now = timezone.now()
    AuditEntry.objects.bulk_create(
        AuditEntry(
            project_id=pk, user_id=job.user_id, actor=job.actor, action=action,
            target=f"batch:{job.pk}", reason=job.reason,
            data={"batch": job.pk, "action": job.action, **data}, at=now,
        )
        for pk in pks
    )  # fmt: skip


def project_pks(job: BatchJob) -> list[int]:
    return sorted(job.projects.values_list("pk", flat=True))


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class Place:
    """Where an item is on the dashboard: its saga, its step, the saga page at that step."""

    saga_id: str
    step_id: str
    url: str


def item_places(items: Sequence[BatchItem]) -> dict[int, Place]:
    """Each item's place (by item pk), for the items whose step is still recorded: one query
    per kind of item, whatever their number."""
    places: dict[tuple[str, int], Place] = {}
    kinds = [
        (BatchItem.Kind.STEP, Step.objects, "step_id"),
        (BatchItem.Kind.APPROVAL, Approval.objects, "step__step_id"),
    ]
    for kind, objects, step_field in kinds:
        pks = [i.target_pk for i in items if i.kind == kind]
        if not pks:
            continue
        rows = objects.filter(pk__in=pks).values_list(
            "pk", "saga__project__slug", "saga__saga_id", step_field
        )
        for pk, slug, saga_id, step_id in rows:
            url = permalinks.step_path(slug, saga_id, step_id)
            places[(kind, pk)] = Place(saga_id, step_id, url)
    return {i.pk: places[(i.kind, i.target_pk)] for i in items if (i.kind, i.target_pk) in places}


def totals(job: BatchJob) -> dict[str, int]:
    """Items per result in the API's names, every name present (``not_started`` included)."""
    found = {PUBLIC[key]: 0 for key in PUBLIC}
    for key, n in job.counts.items():
        found[PUBLIC.get(key, key)] = found.get(PUBLIC.get(key, key), 0) + int(n)
    found[PUBLIC[NOT_STARTED]] = job.total - job.done
    return found


def outcome_filter(result: str) -> Q:
    """Items with the API's ``result`` (or the page's outcome key)."""
    stored = {v: k for k, v in PUBLIC.items()}.get(result, result)
    return Q(outcome="" if stored == NOT_STARTED else stored)

"""Batch operations: retry, force-resolve, leave, approve or reject everything a filter matches.

The flow (README, "Batch operations"):

1. ``batch_preview``: what the filter selects now, in the operator's projects: the exact
   count and a sample, for the confirm page.
2. ``batch_create``: on confirm, the items are resolved from the filter again and frozen
   as ``BatchItem`` rows (refused with 409 if the count is not the one confirmed); the job
   is audited once per project, and a worker is asked to run it.
3. ``batch_run`` (the worker's task): items in order, in chunks, each through the SAME
   service as the single action (``operator_actions.step_act``, ``approvals.approval_decide``),
   which checks the person's permission and the item's state again: a refusal is that
   item's ``refused`` outcome, with the reason. A chunk's actions, their outcomes and the
   job's progress are written in one transaction, so an item is acted on exactly once: a
   worker killed mid-chunk leaves none of the chunk, and the next worker skips every item
   that has an outcome.
4. A retry, resolve or approval is a request: its item stays ``requested`` (still running)
   until the undo it started has ended, and the job ``finishing`` after its last chunk
   until every such item has its outcome (``sagaboard.actions.services.batch_outcomes``): then
   ``finished``.
5. ``batch_cancel``: the job stops between chunks (a queued job at once); what it already
   asked for is still followed to its outcome.

A job is held by one worker at a time through its lease, renewed every chunk; the periodic
sweep (``batch_orphans``) queues again a job whose worker has died (its lease expired, or its
owner is a dead process of this host) or whose task was lost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.db import DatabaseError, transaction
from django.db.models import Q, QuerySet
from django.http import QueryDict
from django.utils import timezone

from sagaboard.access.reads import visible
from sagaboard.actions.services import action_reports, batch_outcomes, operator_actions
from sagaboard.actions.services.batch_outcomes import item_counts, job_audit, project_pks
from sagaboard.approvals.services import approvals
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.audit.services import audit
from sagaboard.engine.reads import rollback_outcomes
from sagaboard.infra import jobs
from sagaboard.models import Approval, BatchItem, BatchJob, Project, Step, User
from sagaboard.search.reads import saga_search
from undo_core import APPROVAL_DECISIONS, STEP_ACTIONS, default_owner, local_owner_dead

State = BatchJob.State
ACTIONS: dict[str, str] = {
    **operator_actions.PERMISSION,
    **dict.fromkeys(APPROVAL_DECISIONS, approvals.DECIDE_PERMISSION),
}
"""Each batch action and the permission the single action needs (checked again per item)."""
MAX_ITEMS = 50_000
"""The most items one job may hold: a filter matching more must be narrowed."""
SAMPLE = 10
ACTIVE = (State.QUEUED, State.RUNNING, State.CANCELLING)
STALE_SECONDS = 30.0
"""A queued job no worker has taken after this long lost its task: the sweep queues it again."""


@dataclass(frozen=True)
class Preview:
    """What a batch would act on, as the confirm page shows it."""

    action: str
    search: saga_search.SagaFilter
    query: str
    """The filter as a canonical query string (what the job stores)."""
    count: int
    sample: list[str]
    """Up to ``SAMPLE`` items, named for people."""

    @property
    def verb(self) -> str:
        return action_reports.VERBS[self.action]


def _action(action: str, user: User) -> None:
    if action not in ACTIONS:
        raise DecisionRefused(
            "validation_error", "action must be retry, resolve, leave, approve or reject", "action"
        )
    if not user.has_perm(ACTIONS[action]):
        role = "approver" if action in APPROVAL_DECISIONS else "operator"
        raise DecisionRefused("forbidden", f"{action} needs the {role} role")


def _search(query: QueryDict) -> saga_search.SagaFilter:
    try:
        return saga_search.parse(query)
    except saga_search.SearchError as err:
        raise DecisionRefused("validation_error", str(err), err.field) from err


def _targets(
    action: str, search: saga_search.SagaFilter, projects: list[Project], user: User
) -> QuerySet[Any]:
    """The steps (or approvals) ``action`` would act on, oldest first: those the filter's
    sagas hold that wait for exactly this kind of decision, in ``projects`` only."""
    sagas = saga_search.select(search, projects, viewer=user).order_by().values("pk")
    mine = [p.pk for p in projects]
    if action in STEP_ACTIONS:
        free = Q(pending_action__isnull=True)
        if action != "retry":  # resolve or leave takes over a retry waiting for its approver
            free |= Q(pk__in=Approval.objects.filter(status=Approval.Status.PENDING).values("step"))
        steps = Step.objects.filter(
            rollback_outcomes.waits_for_operator(), free, saga__project__in=mine, saga__in=sagas
        )
        if search.tool:  # "the failed undos of refund_payment": that tool's steps only
            steps = steps.filter(tool_name=search.tool)
        return steps.order_by("pk")
    pending = Approval.objects.filter(
        status=Approval.Status.PENDING, project__in=mine, saga__in=sagas
    )
    if search.tool:
        pending = pending.filter(step__tool_name=search.tool)
    return pending.order_by("pk")


def _labels(action: str, qs: QuerySet[Any]) -> QuerySet[Any]:
    prefix = "" if action in STEP_ACTIONS else "step__"
    return qs.values_list(
        "pk", "saga__project_id", f"{prefix}tool_name", f"{prefix}step_id", "saga__name",
        "saga__saga_id",
    )  # fmt: skip


def _label(tool: str, step_id: str, name: str, saga_id: str) -> str:
    return f"{tool} ({step_id}) in {name} [{saga_id}]"[:500]


def batch_preview(*, user: User, action: str, query: QueryDict) -> Preview:
    """The exact count and a sample of what ``action`` over the filter ``query`` would act on."""
    _action(action, user)
    search = _search(query)
    qs = _targets(action, search, visible.projects_for_user(user), user)
    sample = [_label(*row[2:]) for row in _labels(action, qs)[:SAMPLE]]
    return Preview(action, search, search.to_query().urlencode(), qs.count(), sample)


def batch_create(
    *, user: User, action: str, query: QueryDict, reason: str, expected: int | None
) -> BatchJob:
    """Freeze the items ``query`` selects now, create the job, audit it, queue it.

    ``expected``: the count the operator confirmed; a different count now (something
    changed meanwhile) is refused (409), so a job never acts on more than was shown.
    """
    reason = (reason or "").strip()
    _action(action, user)
    if not reason:
        raise DecisionRefused("validation_error", "a reason is required", "reason")
    if len(reason) > 2000:
        raise DecisionRefused("validation_error", "the reason is too long (2000 at most)", "reason")
    search = _search(query)
    projects = visible.projects_for_user(user)
    with transaction.atomic():
        rows = list(_labels(action, _targets(action, search, projects, user))[: MAX_ITEMS + 1])
        if not rows:
            raise DecisionRefused(
                "validation_error", "nothing matches this filter in your projects"
            )
        if len(rows) > MAX_ITEMS:
            raise DecisionRefused(
                "validation_error", f"more than {MAX_ITEMS} items match: narrow the filter"
            )
        if expected is not None and expected != len(rows):
            raise DecisionRefused(
                "already_decided",
                f"the selection changed ({len(rows)} match now, {expected} confirmed): "
                "check and confirm again",
            )
        job = BatchJob.objects.create(
            user=user, actor=audit.actor_of(user), action=action, reason=reason,
            query=search.to_query().urlencode(), total=len(rows),
        )  # fmt: skip
        kind = BatchItem.Kind.STEP if action in STEP_ACTIONS else BatchItem.Kind.APPROVAL
        BatchItem.objects.bulk_create(
            (
                BatchItem(job=job, position=n, kind=kind, target_pk=pk, project_id=project,
                          label=_label(*rest))
                for n, (pk, project, *rest) in enumerate(rows)
            ),
            batch_size=1000,
        )  # fmt: skip
        touched = sorted({row[1] for row in rows})
        job.projects.set(touched)
        job_audit(job, "batch.start", touched, {"filter": job.query, "total": job.total})
    jobs.batch_run(job.pk)
    return job


# ---------------------------------------------------------------- reading jobs


def jobs_visible(user: User) -> QuerySet[BatchJob]:
    """Jobs whose every project the user may see (a job over another project is not theirs)."""
    hidden = Project.objects.exclude(pk__in=visible.projects_visible(user).values("pk"))
    if not visible.projects_visible(user).exists():
        return BatchJob.objects.none()
    return BatchJob.objects.exclude(projects__in=hidden).select_related("user")


def job_get(*, user: User, pk: int) -> BatchJob:
    job = jobs_visible(user).filter(pk=pk).first()
    if job is None:
        raise DecisionRefused("not_found", "no such batch job in your projects")
    return job


def job_get_for_project(*, project: Project, pk: int) -> BatchJob:
    """A job of ``project`` only (an API token's): every item of it in that project."""
    others = Project.objects.exclude(pk=project.pk)
    job = BatchJob.objects.filter(pk=pk, projects=project).exclude(projects__in=others).first()
    if job is None:
        raise DecisionRefused("not_found", f"no batch job {pk} in this project", "job_id")
    return job


# ---------------------------------------------------------------- cancelling


def batch_cancel(*, user: User, pk: int) -> BatchJob:
    """Stop a job: a queued one at once, a running one after its current chunk.

    Whoever may take the job's action may cancel it (a colleague stops a runaway batch).
    """
    job = job_get(user=user, pk=pk)
    if not user.has_perm(ACTIONS[job.action]) and job.user_id != user.pk:
        raise DecisionRefused("forbidden", f"cancelling this job needs the right to {job.action}")
    who = audit.actor_of(user)
    with transaction.atomic():
        moved = BatchJob.objects.filter(pk=pk, state=State.QUEUED).update(
            state=State.CANCELLED, cancelled_by=who, finished_at=timezone.now()
        ) or BatchJob.objects.filter(pk=pk, state=State.RUNNING).update(
            state=State.CANCELLING, cancelled_by=who
        )
        job.refresh_from_db()
        if not moved:
            if job.state == State.FINISHING:
                raise DecisionRefused(
                    "already_decided",
                    "the job has made all its requests already: their undos are running",
                )
            raise DecisionRefused("already_decided", f"the job is {job.state} already")
        job_audit(job, "batch.cancel", project_pks(job), {"done": job.done, "by": who})
    return job


# ---------------------------------------------------------------- running (the worker)


def _lease() -> timedelta:
    return timedelta(seconds=settings.SAGABOARD_WORKER_LEASE_SECONDS)


def _free(job: BatchJob) -> bool:
    """Nobody alive holds the job: no lease, an expired one, or a dead process of this host."""
    if job.lease_owner is None:
        return True
    if job.lease_expires_at is not None and job.lease_expires_at <= timezone.now():
        return True
    return local_owner_dead(job.lease_owner)


def _claim(pk: int, owner: str) -> bool:
    """Take the job's lease (compare-and-swap on the owner seen): one worker wins."""
    job = BatchJob.objects.filter(pk=pk, state__in=ACTIVE).first()
    if job is None or not _free(job):
        return False
    now = timezone.now()
    return bool(
        BatchJob.objects.filter(
            pk=pk, state__in=ACTIVE, lease_owner=job.lease_owner,
            lease_expires_at=job.lease_expires_at,
        ).update(
            lease_owner=owner, lease_expires_at=now + _lease(), heartbeat_at=now,
            started_at=job.started_at or now,
            state=State.RUNNING if job.state == State.QUEUED else job.state,
        )
    )  # fmt: skip


def batch_run(pk: int, *, chunk: int | None = None, pause: float | None = None) -> str:
    """Process the job's remaining items in chunks; returns the job's state when it stops.

    Returns "busy" when another live worker holds the job. ``chunk`` and ``pause`` (seconds
    between chunks, to pace a large batch) default to the settings
    ``SAGABOARD_BATCH_CHUNK`` and ``SAGABOARD_BATCH_PAUSE_SECONDS``.
    """
    chunk = chunk or settings.SAGABOARD_BATCH_CHUNK
    pause = settings.SAGABOARD_BATCH_PAUSE_SECONDS if pause is None else pause
    owner = f"{default_owner()}:batch"
    if not _claim(pk, owner):
        job = BatchJob.objects.filter(pk=pk).first()
        return "busy" if job is not None and job.state in ACTIVE else (job.state if job else "gone")
    job = BatchJob.objects.select_related("user").get(pk=pk)
    user = job.user or AnonymousUser()  # an account deleted since: every item is refused
    first = True
    while True:
        state = BatchJob.objects.filter(pk=pk, lease_owner=owner).values_list("state", flat=True)
        current = state.first()
        if current is None:  # our lease was taken over (we stalled past it): stop here
            return "busy"
        if current == State.CANCELLING:
            return _end(job, owner, State.CANCELLED)
        if not first and pause:
            time.sleep(pause)
        first = False
        ids = list(
            BatchItem.objects.filter(job_id=pk, outcome="")
            .order_by("position")
            .values_list("pk", flat=True)[:chunk]
        )
        if not ids:
            return _end(job, owner, State.FINISHED)
        try:
            _chunk_run(job, user, owner, ids)
        except _LeaseLost:
            return "busy"


class _LeaseLost(Exception):
    """Another worker took the job over while this one worked on a chunk (it stalled past
    its lease): the chunk is rolled back, actions and outcomes together."""


def _chunk_run(job: BatchJob, user: User, owner: str, ids: list[int]) -> list[BatchItem]:
    """One chunk in one transaction: each item through the single action's own service, its
    outcome, and the job's progress commit together, so a worker killed mid-chunk leaves
    none of it, and an item is never acted on twice. Each item in a savepoint of its own:
    a refusal (or an error) is that item's outcome, not the chunk's."""
    now = timezone.now()
    with transaction.atomic(), audit.operation(batch=job.pk):
        # The job's row before any audit chain's head, the order batch_cancel and _end take
        # them in: the other order deadlocked against a cancel on PostgreSQL. Its counts as
        # of now (an earlier chunk's requests may have settled since: requests_settle counts
        # under this lock too).
        locked = BatchJob.objects.select_for_update().filter(pk=job.pk, lease_owner=owner)
        stored = locked.values_list("counts", flat=True).first()
        if stored is None:
            raise _LeaseLost
        counts: dict[str, int] = dict(stored)
        items = list(
            BatchItem.objects.select_for_update()
            .filter(pk__in=ids, outcome="")
            .order_by("position")
        )
        for item in items:
            try:
                with transaction.atomic():
                    item.outcome, detail = _act(job, user, item)
            except DecisionRefused as refused:
                item.outcome, detail = "refused", refused.message
            except DatabaseError as error:  # this item only; the savepoint undid its part
                item.outcome, detail = "failed", f"could not be done: {error}"
            item.message, item.done_at = detail[:2000], now
            counts[item.outcome] = counts.get(item.outcome, 0) + 1
        BatchItem.objects.bulk_update(items, ["outcome", "message", "done_at"])
        now = timezone.now()
        held = BatchJob.objects.filter(pk=job.pk, lease_owner=owner).update(
            counts=counts, done=sum(counts.values()), heartbeat_at=now,
            lease_expires_at=now + _lease(),
        )  # fmt: skip
        if not held:
            raise _LeaseLost
    return items


def _act(job: BatchJob, user: User, item: BatchItem) -> tuple[str, str]:
    if job.action in STEP_ACTIONS:
        step = operator_actions.step_act(
            step_pk=item.target_pk, user=user, action=job.action, reason=job.reason
        )
        result, detail = action_reports.step_outcome(job.action, step)
        if result == "awaiting":  # still running: the approver's decision settles it
            return batch_outcomes.REQUESTED, f"the retry waits for approval: {detail}"
        return result, detail
    outcome = approvals.approval_decide(
        approval_id=item.target_pk, user=user, decision=job.action, reason=job.reason
    )
    return action_reports.approval_outcome(outcome.approval)


def _end(job: BatchJob, owner: str, state: str) -> str:
    """The last chunk is done (or the job cancelled): ``state`` if every outcome is known,
    else ``finishing`` until the undos its requests started have ended."""
    counts = item_counts(job.pk)
    running = counts.get("requested", 0) > 0
    with transaction.atomic():
        ended = BatchJob.objects.filter(pk=job.pk, lease_owner=owner).update(
            state=State.FINISHING if running else state, counts=counts,
            done=sum(counts.values()), finished_at=None if running else timezone.now(),
            lease_owner=None, lease_expires_at=None,
        )  # fmt: skip
        if ended and not running:
            job_audit(job, batch_outcomes.ended_action(state), project_pks(job),
                      {"counts": counts, "done": sum(counts.values())})  # fmt: skip
    if ended and running:  # some may have ended meanwhile (or all: then it finishes now)
        batch_outcomes.requests_settle(job_pks=[job.pk])
    return str(BatchJob.objects.values_list("state", flat=True).get(pk=job.pk))


def batch_orphans(*, stale_seconds: float = STALE_SECONDS) -> list[int]:
    """Jobs that should be running and are not: a dead or vanished worker's (lease expired,
    or held by a dead process of this host), or queued with no worker after ``stale_seconds``.

    Queuing one twice is harmless: the lease lets one worker in, and done items are skipped.
    """
    now = timezone.now()
    lapsed = Q(lease_owner__isnull=False, lease_expires_at__lt=now)
    lost = Q(lease_owner__isnull=True, created_at__lt=now - timedelta(seconds=stale_seconds))
    found = list(
        BatchJob.objects.filter(lapsed | lost, state__in=ACTIVE).values_list("pk", flat=True)[:50]
    )
    held = BatchJob.objects.filter(
        state__in=ACTIVE, lease_owner__isnull=False, lease_expires_at__gte=now
    ).values_list("pk", "lease_owner")[:200]
    return found + [pk for pk, owner in held if local_owner_dead(owner)]

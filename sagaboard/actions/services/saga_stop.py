"""An operator's request to roll back a saga that is still running (IN_PROGRESS).

Asking is one conditional UPDATE on the saga row (still IN_PROGRESS, nothing asked
yet), under the row's lock: a double click or two operators at once leave exactly one
request, and the other is told who asked first. Who carries it out depends on who
runs the saga:

* **sagaboard** (``driver = server``): a worker begins the rollback at once with the
  engine's own transitions (``runner.stop_run``) and runs the undos, each under its
  approval rules, exactly as a rollback asked for over the API;
* **the agent** (``driver = client``): nothing can reach into its process, so the
  request waits until its SDK hears it (in the answer to its next events, or its idle
  poll: ``rollback_requests_for``), and its engine rolls back at its next step
  boundary (``undo_core.RollbackRequestedError``). The saga leaving IN_PROGRESS
  closes the request (``requests_closed``, called by ingestion).

An agent that is gone never hears: past ``SAGABOARD_STOP_OVERDUE_SECONDS`` the
periodic sweep marks the request overdue (``requests_overdue``), audits it and tells
the operators (the saga page's banner, the notification outbox). The request stays:
an agent that comes back still hears it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from sagaboard.access.reads import visible
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.audit.services import audit
from sagaboard.infra import jobs
from sagaboard.models import Project, Saga, User
from sagaboard.notify.services import notifications
from undo_core import SagaStatus

PERMISSION = "sagaboard.request_rollback"
MAX_REASON = 2000
MAX_ANSWERED = 500
"""At most this many requests in one answer to an agent (a project with more is broken)."""


def rollback_request(*, saga_pk: int, user: User, reason: str) -> Saga:
    """Ask for the rollback of a running saga; ``DecisionRefused`` (nothing changed) if not.

    Refused: no ``request_rollback`` permission (403), a saga outside the person's
    projects (404: never whose it is), no reason (400), a saga that is not running or
    already has a request (409, saying why).
    """
    reason = (reason or "").strip()
    if not user.has_perm(PERMISSION):
        raise DecisionRefused("forbidden", "requesting a rollback needs the operator role")
    if not reason:
        raise DecisionRefused("validation_error", "a reason is required", "reason")
    if len(reason) > MAX_REASON:
        raise DecisionRefused(
            "validation_error", f"the reason is at most {MAX_REASON} characters", "reason"
        )
    with transaction.atomic():
        saga = visible.saga_for_user(user, saga_pk, lock=True)
        if saga is None:
            raise DecisionRefused("not_found", "no such saga in your projects")
        if saga.status != SagaStatus.IN_PROGRESS:
            raise DecisionRefused(
                "already_decided", f"only a running saga can be stopped: this one is {saga.status}"
            )
        if saga.rollback_requested_at is not None:
            by = audit.actor_of(saga.rollback_requested_by)
            raise DecisionRefused(
                "already_decided",
                f"a rollback was already requested by {by} at "
                f"{saga.rollback_requested_at.isoformat(timespec='seconds')}",
            )
        now = timezone.now()
        won = Saga.objects.filter(
            pk=saga.pk, status=SagaStatus.IN_PROGRESS, rollback_requested_at__isnull=True
        ).update(
            rollback_requested_at=now, rollback_requested_by=user, rollback_request_reason=reason
        )
        if not won:  # cannot happen under the lock; never a half-applied request
            raise DecisionRefused("already_decided", "the saga changed meanwhile: reload it")
        server_run = saga.driver == Saga.Driver.SERVER
        audit.record(
            user=user,
            action="saga.stop_requested",
            saga=saga,
            reason=reason,
            from_state=saga.status,
            to_state="ROLLBACK_REQUESTED",
            data={"driver": saga.driver},
        )
        if server_run:
            jobs.stop_run(saga.pk)
    saga.refresh_from_db()
    return saga


def rollback_requests_for(
    project: Project, saga_ids: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """The pending requests an agent must hear (of ``saga_ids``, or all the project's).

    Marks them heard (the page then says the agent was told). Agent-run sagas only:
    sagaboard's own are carried out by its workers.
    """
    sagas = Saga.objects.filter(
        project=project,
        driver=Saga.Driver.CLIENT,
        status=SagaStatus.IN_PROGRESS,
        rollback_requested_at__isnull=False,
        rollback_request_done_at__isnull=True,
    )
    if saga_ids is not None:
        sagas = sagas.filter(saga_id__in=list(saga_ids))
    rows = list(
        sagas.select_related("rollback_requested_by").order_by("rollback_requested_at")[
            :MAX_ANSWERED
        ]
    )
    unheard = [s.pk for s in rows if s.rollback_request_heard_at is None]
    if unheard:
        Saga.objects.filter(pk__in=unheard, rollback_request_heard_at__isnull=True).update(
            rollback_request_heard_at=timezone.now()
        )
    return [
        {
            "saga_id": s.saga_id,
            "by": audit.actor_of(s.rollback_requested_by),
            "reason": s.rollback_request_reason or "",
            "at": s.rollback_requested_at.isoformat() if s.rollback_requested_at else None,
        }
        for s in rows
    ]


REQUEST_COLUMNS = ("rollback_requested_at", "rollback_request_done_at")
"""What ingestion reads of a batch's sagas, with their lock, for ``after_batch``: a request
is open while the first is set and the second is not."""


def after_batch(project: Project, pending: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """After an agent's batch is stored: close what it carried out, answer what it must hear.

    ``pending``: (saga id, status after the batch) of the batch's sagas whose request was
    open, as ingestion read them under its lock (``REQUEST_COLUMNS``). Nearly every batch
    has none, and then this costs nothing: the read is part of the batch's load, not a
    query of its own (it was one per request, a twentieth of a single event's CPU).
    """
    pending = list(pending)
    if not pending:
        return []
    ended = [sid for sid, status in pending if status != SagaStatus.IN_PROGRESS]
    running = [sid for sid, status in pending if status == SagaStatus.IN_PROGRESS]
    with transaction.atomic():
        requests_closed(project, ended)
    return rollback_requests_for(project, running) if running else []


def requests_closed(project: Project, saga_ids: Iterable[str]) -> int:
    """Close the requests of sagas (of a batch just stored) that have left IN_PROGRESS.

    The saga going COMPENSATING is the agent carrying the request out; COMPLETED or
    FAILED means it ended before it heard (the page says which, from the status).
    """
    ids = list(saga_ids)
    if not ids:
        return 0
    closing = list(
        Saga.objects.filter(
            project=project,
            saga_id__in=ids,
            rollback_requested_at__isnull=False,
            rollback_request_done_at__isnull=True,
        ).exclude(status=SagaStatus.IN_PROGRESS)
    )
    for saga in closing:
        Saga.objects.filter(pk=saga.pk).update(rollback_request_done_at=timezone.now())
        carried = saga.status != SagaStatus.COMPLETED
        audit.record(
            user=None,
            actor="agent" if saga.agent_driven else "worker",
            action="saga.stop_done" if carried else "saga.stop_moot",
            saga=saga,
            reason=(
                f"the rollback requested by {audit.actor_of(saga.rollback_requested_by)} "
                + ("was carried out" if carried else "came too late: the saga completed first")
            ),
            to_state=saga.status,
        )
    return len(closing)


def requests_overdue() -> int:
    """Mark requests not carried out within ``SAGABOARD_STOP_OVERDUE_SECONDS``; tell people.

    Run by the periodic sweep. Each request is marked once (audited, announced); it
    stays pending, so an agent that comes back still rolls back.
    """
    cutoff = timezone.now() - timedelta(seconds=settings.SAGABOARD_STOP_OVERDUE_SECONDS)
    late = list(
        Saga.objects.select_related("project", "rollback_requested_by").filter(
            status=SagaStatus.IN_PROGRESS,
            rollback_requested_at__lt=cutoff,
            rollback_request_done_at__isnull=True,
            rollback_request_overdue_at__isnull=True,
        )[:100]
    )
    marked = 0
    for saga in late:
        with transaction.atomic():
            won = Saga.objects.filter(pk=saga.pk, rollback_request_overdue_at__isnull=True).update(
                rollback_request_overdue_at=timezone.now()
            )
            if not won:
                continue
            marked += 1
            heard = saga.rollback_request_heard_at is not None
            why = (
                "its agent was told but has not rolled back (a step still running?)"
                if heard
                else "its agent has not been heard from since (gone, or between steps for long)"
            )
            audit.record(
                user=None,
                actor="system",
                action="saga.stop_overdue",
                saga=saga,
                reason=f"the rollback requested by {audit.actor_of(saga.rollback_requested_by)} "
                f"is overdue: {why}",
                to_state="ROLLBACK_REQUESTED",
            )
            notifications.notify_rollback_overdue(saga, why)
    return marked

"""Outgoing notifications: a Slack-compatible JSON webhook, HMAC-signed, retried until delivered.

Rows are written to an outbox (``Notification``) in the transaction of the
change they announce, then sent by a worker; a failed send is retried with
backoff (the periodic sweep picks up what is due), so a receiver that is down
for a while still gets every message, late rather than never.
"""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from sagaboard.domain import jobs
from sagaboard.domain.undo_kinds import sign
from sagaboard.infra import permalinks
from sagaboard.models import Approval, Notification, Project, Saga, Step
from undo_core import RollbackAssessment, status_text

MAX_ATTEMPTS = 12


def _link(saga: Saga, step: Step | None = None) -> str:
    """The saga page's address; with ``step``, its permalink (the page at that step's card)."""
    if step is None:
        return (
            f"{settings.SAGABOARD_BASE_URL}{permalinks.saga_path(saga.project.slug, saga.saga_id)}"
        )
    path = permalinks.step_path(saga.project.slug, saga.saga_id, step.step_id)
    return f"{settings.SAGABOARD_BASE_URL}{path}"


def _enqueue(project: Project, kind: str, text: str, data: dict[str, object]) -> None:
    if not settings.SAGABOARD_NOTIFY_URL:
        return
    note = Notification.objects.create(
        project=project, kind=kind, payload={"text": text, "sagaboard": {"kind": kind, **data}}
    )
    jobs.notification_send(note.pk)


def notify_approval(approval: Approval, kind: str) -> None:
    if not settings.SAGABOARD_NOTIFY_URL:
        return
    saga = Saga.objects.select_related("project").get(pk=approval.saga_id)
    step = Step.objects.get(pk=approval.step_id)
    verb = {"approval.created": "needs approval", "approval.expired": "approval expired"}[kind]
    link = _link(saga, step)
    text = (
        f"Undo of {step.tool_name} ({step.step_id}) in saga {saga.name} {verb}: "
        f"{approval.why}. <{settings.SAGABOARD_BASE_URL}{reverse('approval_queue')}|Open the queue>"
    )
    _enqueue(
        saga.project,
        kind,
        text,
        {
            "approval": approval.pk,
            "saga_id": saga.saga_id,
            "step_id": step.step_id,
            "url": link,
            "approval_url": f"{settings.SAGABOARD_BASE_URL}{permalinks.approval_path(approval.pk)}",
        },
    )


def notify_rollback_failed(saga: Saga, step: Step, **_signal: object) -> None:
    if not settings.SAGABOARD_NOTIFY_URL:
        return
    link = _link(saga, step)
    text = (
        f"Undo of {step.tool_name} ({step.step_id}) in saga {saga.name} failed: "
        f"{(step.error or '')[:300]}. <{link}|Open the saga>"
    )
    _enqueue(
        saga.project,
        "step.rollback_failed",
        text,
        {"saga_id": saga.saga_id, "step_id": step.step_id, "url": link},
    )


def notify_rollback_overdue(saga: Saga, why: str) -> None:
    """An operator's rollback request that its agent has not carried out in time."""
    link = _link(saga)
    by = saga.rollback_requested_by.get_username() if saga.rollback_requested_by else "someone"
    text = (
        f"Rollback of saga {saga.name}, requested by {by}, is overdue: {why}. "
        f"<{link}|Open the saga>"
    )
    _enqueue(
        saga.project,
        "saga.stop_overdue",
        text,
        {"saga_id": saga.saga_id, "requested_by": by, "url": link},
    )


def notify_rolled_back(saga: Saga, found: RollbackAssessment, **_signal: object) -> None:
    """A rollback that ended ROLLED_BACK with exceptions: say which side effects remain.

    A clean rollback is not announced (nothing is left for anyone); one with an undo
    rejected, resolved by hand or without an undo must never read as a clean one.
    """
    if not settings.SAGABOARD_NOTIFY_URL or found.clean:
        return
    link = _link(saga)
    steps = "; ".join(f"{e.tool_name} ({e.step_id}): {e.why}" for e in found.exceptions[:10])
    label = status_text(saga.status, found.outcome, found.summary)
    text = f"Saga {saga.name} {label}: {steps}. <{link}|Open the saga>"
    _enqueue(
        saga.project,
        "saga.rolled_back_with_exceptions",
        text,
        {
            "saga_id": saga.saga_id,
            "status": saga.status,
            "outcome": found.outcome.value if found.outcome else None,
            "exceptions": [
                {"step_id": e.step_id, "tool_name": e.tool_name, "kind": e.kind.value}
                for e in found.exceptions
            ],
            "url": link,
        },
    )


def notification_send(pk: int) -> bool:
    """Try one delivery; returns True when delivered (or nothing is left to do)."""
    with transaction.atomic():
        note = Notification.objects.select_for_update(skip_locked=True).filter(pk=pk).first()
        if note is None or note.delivered_at is not None or note.attempts >= MAX_ATTEMPTS:
            return True
        body = json.dumps(note.payload, ensure_ascii=False).encode()
        note.attempts += 1
        try:
            response = httpx.post(
                settings.SAGABOARD_NOTIFY_URL,
                content=body,
                headers={
                    "content-type": "application/json",
                    "x-sagaboard-signature": sign(body, settings.SAGABOARD_WEBHOOK_SECRET),
                    "x-sagaboard-delivery": str(note.pk),
                },
                timeout=10,
            )
            ok = response.status_code // 100 == 2
            error = "" if ok else f"HTTP {response.status_code}: {response.text[:300]}"
        except httpx.HTTPError as err:
            ok, error = False, f"{type(err).__name__}: {err}"
        if ok:
            note.delivered_at = timezone.now()
        else:
            note.last_error = error
            note.next_attempt_at = timezone.now() + timedelta(seconds=min(2**note.attempts, 3600))
        note.save(update_fields=["attempts", "delivered_at", "last_error", "next_attempt_at"])
        return ok


def notifications_due() -> list[int]:
    """Undelivered notifications whose next attempt is due (for the periodic sweep)."""
    return list(
        Notification.objects.filter(
            delivered_at__isnull=True,
            next_attempt_at__lte=timezone.now(),
            attempts__lt=MAX_ATTEMPTS,
        ).values_list("pk", flat=True)[:200]
    )

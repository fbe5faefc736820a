"""Outgoing notifications: a Slack-compatible JSON webhook, HMAC-signed, retried until delivered;
decision mails (``decision_links``) and answers to Slack interactions (``slack``) go the same way.

Rows are written to an outbox (``Notification``) in the transaction of the
change they announce, then sent by a worker; a failed send is retried with
backoff (the periodic sweep picks up what is due), so a receiver that is down
for a while still gets every message, late rather than never.
"""

from __future__ import annotations

import json
import smtplib
from datetime import timedelta

import httpx
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from sagaboard.infra import jobs, permalinks
from sagaboard.infra.signatures import sign
from sagaboard.models import Approval, DecisionLink, Notification, Project, Saga, Step
from sagaboard.notify.services import link_tokens
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


def _enqueue(
    project: Project,
    kind: str,
    text: str,
    data: dict[str, object],
    extra: dict[str, object] | None = None,
) -> None:
    if not settings.SAGABOARD_NOTIFY_URL:
        return
    note = Notification.objects.create(
        project=project,
        kind=kind,
        payload={"text": text, **(extra or {}), "sagaboard": {"kind": kind, **data}},
    )
    jobs.notification_send(note.pk)


def notify_approval(approval: Approval, kind: str) -> None:
    """Announce an approval: the webhook (Slack: with Approve/Reject buttons) and, when it
    is asked for, a mail with a personal decision link to each person who may decide it."""
    if kind == "approval.created" and settings.SAGABOARD_EMAIL_APPROVALS:
        _mail_approvers(approval)
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
    extra: dict[str, object] = {}
    if kind == "approval.created" and settings.SAGABOARD_SLACK_SIGNING_SECRET:
        extra["blocks"] = approval_blocks(approval.pk, text, buttons=True)
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
        extra,
    )


APPROVE, REJECT = "sagaboard_approve", "sagaboard_reject"
"""The ``action_id`` of the Slack buttons (``sagaboard.approvals.services.slack`` reads them)."""


def approval_blocks(approval_pk: int, text: str, *, buttons: bool) -> list[dict[str, object]]:
    """A Slack message's blocks: the text, then (while it waits) Approve and Reject buttons.

    Each button asks Slack for a confirmation first: one stray click never decides.
    """
    blocks: list[dict[str, object]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}}
    ]
    if buttons:
        blocks.append(
            {
                "type": "actions",
                "block_id": f"sagaboard-approval-{approval_pk}",
                "elements": [
                    _button(APPROVE, "Approve undo", "primary", approval_pk),
                    _button(REJECT, "Reject", "danger", approval_pk),
                ],
            }
        )
    return blocks


def _button(action_id: str, label: str, style: str, approval_pk: int) -> dict[str, object]:
    verb = "Approve" if action_id == APPROVE else "Reject"
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "style": style,
        "value": str(approval_pk),
        "confirm": {
            "title": {"type": "plain_text", "text": f"{verb} this undo?"},
            "text": {"type": "mrkdwn", "text": f"{verb} approval #{approval_pk} as yourself."},
            "confirm": {"type": "plain_text", "text": verb},
            "deny": {"type": "plain_text", "text": "Cancel"},
        },
    }


def slack_respond(project: Project, response_url: str, body: dict[str, object]) -> None:
    """Post ``body`` to a Slack interaction's ``response_url`` (update the message, or tell
    the clicker), through the outbox: sent by a worker, retried like every notification."""
    note = Notification.objects.create(
        project=project, kind="slack.response", payload={"response_url": response_url, "body": body}
    )
    jobs.notification_send(note.pk)


def _mail_approvers(approval: Approval) -> None:
    """One outbox row per person who may decide, each with their own link (minted on send)."""
    saga = Saga.objects.select_related("project").get(pk=approval.saga_id)
    with transaction.atomic():  # the links and their outbox rows: all of them, or none
        for link in link_tokens.links_open(approval):
            note = Notification.objects.create(
                project=saga.project,
                kind="approval.email",
                payload={"email": {"link": link.pk, "to": link.user.email}},
            )
            jobs.notification_send(note.pk)


def _mail_text(link: DecisionLink, url: str) -> tuple[str, str]:
    """The subject and body of a decision mail: what would be undone, and the person's link."""
    a = link.approval
    saga, step = a.saga, a.step
    policy = a.policy_snapshot.get("name")
    votes = a.votes.count()
    lines = [
        f"Undo of {step.tool_name} ({step.step_id}) in saga {saga.name} ({saga.saga_id}) "
        f"needs approval.",
        "",
        f"Why: {a.why}",
        f"Policy: {policy} (v{a.policy_snapshot.get('version')})" if policy else "Policy: none",
        f"Votes: {votes} of {a.required} approvals",
        "",
        "Review and decide (you will be asked to sign in and to confirm; opening the link",
        "decides nothing):",
        url,
        "",
        f"The link is yours alone, decides once, and expires {link.expires_at:%Y-%m-%d %H:%M} UTC.",
        f"The queue: {settings.SAGABOARD_BASE_URL}{reverse('approval_queue')}",
    ]
    return f"[sagaboard] Approve undo of {step.tool_name} in {saga.name}?", "\n".join(lines)


def _deliver_mail(spec: dict[str, object]) -> tuple[bool, str]:
    """Mint the link's token and mail it; nothing to send once the approval is settled."""
    link = (
        DecisionLink.objects.select_related("approval__saga", "approval__step", "user")
        .filter(pk=spec.get("link"))
        .first()
    )
    if link is None or link.used_at is not None or not link.approval.is_pending:
        return True, "not sent: the approval was decided (or the link used) before"
    subject, body = _mail_text(link, link_tokens.link_url(link_tokens.link_mint(link)))
    try:
        send_mail(subject, body, None, [str(spec["to"])])
    except (OSError, smtplib.SMTPException) as err:
        return False, f"{type(err).__name__}: {err}"
    return True, ""


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[bool, str]:
    try:
        response = httpx.post(
            url, content=body, headers={"content-type": "application/json", **headers}, timeout=10
        )
    except httpx.HTTPError as err:
        return False, f"{type(err).__name__}: {err}"
    if response.status_code // 100 == 2:
        return True, ""
    return False, f"HTTP {response.status_code}: {response.text[:300]}"


def _deliver(note: Notification) -> tuple[bool, str]:
    """Send one outbox row where its kind goes: a mail, a Slack response, or the webhook."""
    payload = note.payload
    if "email" in payload:
        return _deliver_mail(payload["email"])
    if "response_url" in payload:
        body = json.dumps(payload["body"], ensure_ascii=False).encode()
        return _post(str(payload["response_url"]), body, {})
    body = json.dumps(payload, ensure_ascii=False).encode()
    return _post(
        settings.SAGABOARD_NOTIFY_URL,
        body,
        {
            "x-sagaboard-signature": sign(body, settings.SAGABOARD_WEBHOOK_SECRET),
            "x-sagaboard-delivery": str(note.pk),
        },
    )


def notify_rollback_failed(saga: Saga, step: Step) -> None:
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


def notify_rolled_back(saga: Saga, found: RollbackAssessment) -> None:
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
        note.attempts += 1
        ok, error = _deliver(note)
        if ok:
            note.delivered_at, note.last_error = timezone.now(), error
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

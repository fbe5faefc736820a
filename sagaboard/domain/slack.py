"""Approve or reject from Slack: the interactive buttons of the approval message.

A request is taken only as Slack specifies (api.slack.com/authentication/verifying-requests-
from-slack): ``X-Slack-Request-Timestamp`` within five minutes of now, and
``X-Slack-Signature`` equal to ``v0=`` + HMAC-SHA256 of ``v0:{timestamp}:{raw body}`` with the
app's signing secret, compared in constant time. A request already taken (same signature) is
a replay and is refused: the signatures seen are kept for the length of the window.

The clicking Slack user must be linked to a sagaboard user (``SlackIdentity``, made by an
admin with ``sagaboard_slack_link``); the decision then goes through
``approvals.approval_decide`` like the queue page's (roles, projects, self-approval, four
eyes, audit with ``via=slack``). Slack buttons carry no reason, so the reason recorded says
the decision came from Slack and who clicked. The outcome goes back through the interaction's
``response_url`` (the outbox sends it): the message is updated for everyone when the approval
is settled (or a vote counted), and only the clicker is told when the click was refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from sagaboard.domain import approvals, notifications
from sagaboard.errors import ServiceError
from sagaboard.models import Approval, SlackIdentity, SlackRequest

WINDOW_SECONDS = 300
"""How far a request's timestamp may be from now (Slack's five minutes)."""
ACTIONS = {notifications.APPROVE: "approve", notifications.REJECT: "reject"}


class SlackRefused(ServiceError):
    """A Slack request not taken (bad or stale signature, replay, unreadable payload)."""


def signature_of(secret: str, timestamp: str, body: bytes) -> str:
    """What Slack sends in ``X-Slack-Signature`` for this body at this time."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def request_verify(
    *, body: bytes, timestamp: str, signature: str, now: float | None = None
) -> None:
    """Take the request only if Slack signed it just now, and never the same one twice."""
    secret = settings.SAGABOARD_SLACK_SIGNING_SECRET
    now = time.time() if now is None else now
    if not timestamp.isdigit() or abs(now - int(timestamp)) > WINDOW_SECONDS:
        raise SlackRefused(401, "stale", "the request timestamp is missing or not within 5 minutes")
    if not hmac.compare_digest(signature_of(secret, timestamp, body), signature):
        raise SlackRefused(401, "bad_signature", "the Slack signature does not match")
    seen = timezone.now()
    SlackRequest.objects.filter(seen_at__lt=seen - timedelta(seconds=2 * WINDOW_SECONDS)).delete()
    try:
        with transaction.atomic():
            SlackRequest.objects.create(signature=signature, seen_at=seen)
    except IntegrityError as err:
        raise SlackRefused(409, "replayed", "this request was already taken (a replay)") from err


@dataclass(frozen=True)
class Answer:
    """What became of a click: ``ok`` when a vote was counted, ``text`` for the people."""

    ok: bool
    text: str


def _action(payload: dict[str, Any]) -> tuple[str, int]:
    actions = payload.get("actions") if payload.get("type") == "block_actions" else None
    first = actions[0] if isinstance(actions, list) and actions else {}
    decision = ACTIONS.get(str(first.get("action_id", "")))
    value = str(first.get("value", ""))
    if decision is None or not value.isdigit():
        raise SlackRefused(400, "validation_error", "not a sagaboard Approve/Reject button")
    return decision, int(value)


def payload_parse(raw: str) -> dict[str, Any]:
    """The form field ``payload``: JSON of a ``block_actions`` interaction."""
    try:
        payload = json.loads(raw)
    except ValueError as err:
        raise SlackRefused(400, "validation_error", "payload is not JSON") from err
    if not isinstance(payload, dict):
        raise SlackRefused(400, "validation_error", "payload is not a JSON object")
    return payload


def interaction_handle(payload: dict[str, Any]) -> Answer:
    """Decide as the linked person, and send the outcome back to Slack."""
    decision, approval_pk = _action(payload)
    slack_user = payload.get("user") or {}
    slack_id = str(slack_user.get("id", ""))
    identity = SlackIdentity.objects.select_related("user").filter(slack_user_id=slack_id).first()
    if identity is None or not identity.user.is_active:
        answer = Answer(
            False,
            f"Your Slack user ({slack_id}) is not linked to a sagaboard user: ask an admin to "
            f"run `manage.py sagaboard_slack_link {slack_id} <username>`.",
        )
    else:
        answer = _decide(identity.user, decision, approval_pk, slack_user)
    _respond(payload, approval_pk, answer)
    return answer


def _decide(user: Any, decision: str, approval_pk: int, slack_user: dict[str, Any]) -> Answer:
    handle = slack_user.get("username") or slack_user.get("name") or slack_user.get("id")
    reason = f"{decision}d from Slack by @{handle}"
    try:
        outcome = approvals.approval_decide(
            approval_id=approval_pk, user=user, decision=decision, reason=reason, via="slack"
        )
    except approvals.DecisionRefused as refused:
        return Answer(False, f"Not decided: {refused.message}")
    a = outcome.approval
    who = user.get_username()
    what = f"undo of {a.step.tool_name} ({a.step.step_id}) in saga {a.saga.name}"
    if outcome.decided:
        mark = ":white_check_mark:" if a.status == Approval.Status.APPROVED else ":x:"
        return Answer(True, f"{mark} {a.status.capitalize()} by {who} (from Slack): {what}.")
    votes = a.votes.count()
    return Answer(
        True,
        f"{who} approved the {what}: {votes} of {a.required} approvals, a second, different "
        "person must approve.",
    )


def _respond(payload: dict[str, Any], approval_pk: int, answer: Answer) -> None:
    url = str(payload.get("response_url", ""))
    approval = Approval.objects.filter(pk=approval_pk).select_related("project").first()
    if not url.startswith(settings.SAGABOARD_SLACK_RESPONSE_URL_PREFIX) or approval is None:
        return  # never post anywhere but Slack (and only about an approval that exists)
    if answer.ok:
        body: dict[str, Any] = {
            "replace_original": True,
            "text": answer.text,
            "blocks": notifications.approval_blocks(
                approval_pk, answer.text, buttons=approval.is_pending
            ),
        }
    else:
        body = {"response_type": "ephemeral", "replace_original": False, "text": answer.text}
    notifications.slack_respond(approval.project, url, body)

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

A signed payload that is not such a click (another type, a ``user`` or an ``actions`` item
of another shape, a ``value`` that is not an approval id) is refused with a 400 before
anything is looked up (``click_of``); what sagaboard only passes on (the clicker's handle,
the ``response_url``) is used only when it is text it can store.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from sagaboard.approvals.services import approvals
from sagaboard.errors import ServiceError
from sagaboard.infra import text_policy
from sagaboard.infra.http import json_body
from sagaboard.infra.http.limits import BIGINT
from sagaboard.models import Approval, SlackIdentity, SlackRequest, User
from sagaboard.notify.services import notifications
from undo_core import DecisionAction

WINDOW_SECONDS = 300
"""How far a request's timestamp may be from now (Slack's five minutes)."""
ACTIONS = {
    notifications.APPROVE: DecisionAction.APPROVE,
    notifications.REJECT: DecisionAction.REJECT,
}


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
    # ASCII digits only, and few: "²" is a digit to isdigit() but not to int(), and int()
    # refuses (or takes long over) thousands of digits.
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 20) or (
        abs(now - int(timestamp)) > WINDOW_SECONDS
    ):
        raise SlackRefused(401, "stale", "the request timestamp is missing or not within 5 minutes")
    expected = signature_of(secret, timestamp, body).encode()
    if not hmac.compare_digest(expected, signature.encode("utf-8", "surrogatepass")):
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


_SLACK_ID = re.compile(r"[A-Za-z0-9]{1,64}", re.ASCII)
"""A Slack user id as Slack writes them (``U012ABCDEF``), within ``SlackIdentity``'s column."""
_APPROVAL_PK = re.compile(r"[1-9][0-9]{0,18}", re.ASCII)
"""An approval's id as the button carries it (``str(approval.pk)``): at most 19 digits."""
_URL = re.compile(r"[!-~]{1,2000}", re.ASCII)
"""A ``response_url`` sagaboard may post to: printable ASCII, no space (then the prefix)."""
_MAX_HANDLE = 100


@dataclass(frozen=True)
class Click:
    """The parts of a ``block_actions`` interaction sagaboard reads, checked for shape.

    Slack signs what it sends, but a signature says who sent it, not that it is a click of
    sagaboard's buttons: anything else (another type, a ``user`` that is not an object, an
    ``actions`` item that is not one, a ``value`` that is not an approval id) is refused
    (400) before anything is looked up. The fields sagaboard only passes on are used only
    when they are text it can store (``handle``, ``response_url``), else left out.
    """

    decision: str
    approval_pk: int
    slack_id: str
    handle: str
    response_url: str


def _refuse(what: str) -> NoReturn:
    raise SlackRefused(400, "validation_error", f"not a sagaboard Approve/Reject button: {what}")


def _text(value: Any, longest: int) -> str | None:
    """``value`` when it is text sagaboard can store and echo: not too long, printable, no
    lone surrogate."""
    if type(value) is not str or not 0 < len(value) <= longest:
        return None
    return value if text_policy.text_problem(value) is None and value.isprintable() else None


def click_of(payload: dict[str, Any]) -> Click:
    """The click in ``payload``, or ``SlackRefused`` (400) when it is not one of sagaboard's."""
    if payload.get("type") != "block_actions":
        _refuse("the payload's type is not block_actions")
    actions = payload.get("actions")
    if type(actions) is not list or not actions or type(actions[0]) is not dict:
        _refuse("actions is not a list of button actions")
    first = actions[0]
    action_id, value = first.get("action_id"), first.get("value")
    decision = ACTIONS.get(action_id) if type(action_id) is str else None
    if decision is None:
        _refuse("the action is not sagaboard's Approve or Reject")
    if type(value) is not str or not _APPROVAL_PK.fullmatch(value) or int(value) > BIGINT:
        _refuse("the button's value is not an approval id")
    user: Any = payload.get("user")
    slack_id = user.get("id") if type(user) is dict else None
    if type(slack_id) is not str or not _SLACK_ID.fullmatch(slack_id):
        _refuse("user is not a Slack user with an id")
    handle = _text(user.get("username"), _MAX_HANDLE) or _text(user.get("name"), _MAX_HANDLE)
    url = payload.get("response_url")
    url = url if type(url) is str and _URL.fullmatch(url) else ""
    return Click(decision, int(value), slack_id, handle or slack_id, url)


def payload_parse(raw: str) -> dict[str, Any]:
    """The form field ``payload``: JSON of a ``block_actions`` interaction."""
    try:
        payload = json.loads(raw)
    except json.JSONDecodeError as err:
        raise SlackRefused(400, "validation_error", "payload is not JSON") from err
    except ValueError as err:  # Python converts at most sys.get_int_max_str_digits() digits
        why = f"payload holds an integer too large (more than {json_body.max_int_digits()} digits)"
        raise SlackRefused(400, "validation_error", why) from err
    except RecursionError as err:
        raise SlackRefused(400, "validation_error", "payload nests too deep") from err
    if not isinstance(payload, dict):
        raise SlackRefused(400, "validation_error", "payload is not a JSON object")
    return payload


def interaction_handle(payload: dict[str, Any]) -> Answer:
    """Decide as the linked person, and send the outcome back to Slack."""
    click = click_of(payload)
    slack_id = click.slack_id
    identity = SlackIdentity.objects.select_related("user").filter(slack_user_id=slack_id).first()
    if identity is None or not identity.user.is_active:
        answer = Answer(
            False,
            f"Your Slack user ({slack_id}) is not linked to a sagaboard user: ask an admin to "
            f"run `manage.py sagaboard_slack_link {slack_id} <username>`.",
        )
    else:
        answer = _decide(identity.user, click)
    _respond(click, answer)
    return answer


def _decide(user: User, click: Click) -> Answer:
    decision = click.decision
    done = "approved" if decision == "approve" else "rejected"
    reason = f"{done} from Slack by @{click.handle}"
    try:
        outcome = approvals.approval_decide(
            approval_id=click.approval_pk,
            user=user,
            decision=decision,
            reason=reason,
            via="slack",
        )
    except approvals.DecisionRefused as refused:
        return Answer(False, f"Not decided: {refused.message}")
    a = outcome.approval
    who = user.get_username()
    what = f"undo of {a.step.tool_name} ({a.step.step_id}) in saga {a.saga.name}"
    if outcome.decided:
        mark = ":white_check_mark:" if a.status == Approval.Status.APPROVED else ":x:"
        return Answer(True, f"{mark} {a.status.capitalize()} by {who} (from Slack): {what}.")
    progress = f"{outcome.progress} (someone other than {who})"
    return Answer(True, f"{who} approved the {what}: {progress}.")


def _respond(click: Click, answer: Answer) -> None:
    url, approval_pk = click.response_url, click.approval_pk
    if not url or not url.startswith(settings.SAGABOARD_SLACK_RESPONSE_URL_PREFIX):
        return  # never post anywhere but Slack
    approval = Approval.objects.filter(pk=approval_pk).select_related("project").first()
    if approval is None:
        return  # only about an approval that exists
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

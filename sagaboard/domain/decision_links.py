"""Personal decision links: a signed, single-use, expiring address to decide one approval.

When an approval is asked for, every project member who may decide it gets a link row
(``links_open``); the notification outbox mails it. The token is minted when the mail is
sent (``link_mint``) and only its SHA-256 is stored, so neither the database nor the
outbox holds a usable link. A token is ``django.core.signing`` over (link, approval,
user, nonce) with the secret key: a forged or altered one fails the signature before
any query.

Opening a link never decides (the page asks for a confirmation by POST, CSRF-checked).
Deciding through one locks the link, checks it is the signed-in person's, unused and
unexpired, then calls ``approvals.approval_decide``: the same rules as the queue page
(roles, projects, self-approval, four eyes, audit). The link is spent only by a decision
taken; a refused one leaves it as it was.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any, ClassVar

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from sagaboard.domain import approvals  # a module: approvals -> notifications -> here
from sagaboard.errors import ServiceError
from sagaboard.models import Approval, DecisionLink

SALT = "sagaboard.decision-link"


class LinkRefused(ServiceError):
    """A decision link that cannot be used; ``message`` says why, for the person who opened it."""

    STATUS: ClassVar[dict[str, int]] = {"invalid": 404, "foreign": 403, "used": 410, "expired": 410}

    def __init__(self, code: str, message: str) -> None:
        super().__init__(self.STATUS[code], code, message)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def approvers_of(approval: Approval) -> list[Any]:
    """Members of the approval's project who may decide it, with an e-mail address.

    Not the person whose token posted the saga: they may not decide its undos.
    """
    token = approval.saga.posted_by_token
    people = (
        get_user_model()
        .objects.filter(sagaboard_projects=approval.project_id, is_active=True)
        .exclude(email="")
    )
    if token is not None and token.created_by_id is not None:
        people = people.exclude(pk=token.created_by_id)
    return [u for u in people.order_by("pk") if u.has_perm("sagaboard.decide_approval")]


def links_open(approval: Approval) -> list[DecisionLink]:
    """A link row for each person who may decide ``approval`` (its token is minted on send)."""
    expires = timezone.now() + timedelta(hours=settings.SAGABOARD_DECISION_LINK_HOURS)
    return [
        DecisionLink.objects.create(approval=approval, user=user, expires_at=expires)
        for user in approvers_of(approval)
    ]


def link_mint(link: DecisionLink) -> str:
    """A new token for ``link`` (the previous one stops working); only its hash is kept."""
    token = signing.dumps(
        {"l": link.pk, "a": link.approval_id, "u": link.user_id, "n": secrets.token_urlsafe(12)},
        salt=SALT,
    )
    DecisionLink.objects.filter(pk=link.pk).update(token_hash=_hash(token))
    return token


def link_url(token: str) -> str:
    return f"{settings.SAGABOARD_BASE_URL}{reverse('decision_link', args=[token])}"


def link_check(*, token: str, user: Any, lock: bool = False) -> DecisionLink:
    """The link ``token`` names, if ``user`` may use it now; ``LinkRefused`` says why not."""
    try:
        signed = signing.loads(token, salt=SALT)
    except signing.BadSignature:
        signed = None
    if not isinstance(signed, dict) or not isinstance(signed.get("l"), int):
        raise LinkRefused(
            "invalid", "This is not a valid decision link: copy it whole from the mail."
        )
    rows = DecisionLink.objects.select_related("approval__saga__project", "approval__step")
    if lock:
        rows = rows.select_for_update(of=("self",))
    link = rows.filter(pk=signed["l"]).first()
    if link is None or link.token_hash != _hash(token):
        raise LinkRefused(
            "invalid", "This decision link is no longer valid: a newer mail replaced it."
        )
    if link.user_id != user.pk or signed.get("u") != user.pk:
        raise LinkRefused(
            "foreign",
            "This decision link was sent to someone else. Sign in as the person it was sent "
            "to, or decide from the approval queue.",
        )
    if link.used_at is not None:
        raise LinkRefused("used", "This decision link was already used: each link decides once.")
    if link.expires_at <= timezone.now():
        raise LinkRefused(
            "expired", "This decision link has expired: decide from the approval queue."
        )
    return link


def link_decide(*, token: str, user: Any, decision: str, reason: str) -> approvals.Outcome:
    """Decide the link's approval as ``user``, then spend the link (one transaction).

    The link row is locked first, so the same link posted twice at once decides once.
    """
    void: approvals.DecisionRefused | None = None
    with transaction.atomic():
        link = link_check(token=token, user=user, lock=True)
        try:
            outcome = approvals.approval_decide(
                approval_id=link.approval_id, user=user, decision=decision, reason=reason,
                via="email",
            )  # fmt: skip
        except approvals.DecisionRefused as refused:
            if refused.code != "void":
                raise
            void = refused  # the approval was voided: that stands (as on the queue page)
        else:
            DecisionLink.objects.filter(pk=link.pk).update(used_at=timezone.now())
    if void is not None:
        raise void
    return outcome

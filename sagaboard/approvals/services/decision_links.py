"""Personal decision links: a signed, single-use, expiring address to decide one approval.

When an approval is asked for, every project member who may decide it gets a link row
(``link_tokens.links_open``); the notification outbox mails it. The token is minted when the
mail is sent (``link_tokens.link_mint``) and only its SHA-256 is stored, so neither the
database nor the outbox holds a usable link. A token is ``django.core.signing`` over
(link, approval, user, nonce) with the secret key: a forged or altered one fails the
signature before any query.

Opening a link never decides (the page asks for a confirmation by POST, CSRF-checked).
Deciding through one locks the link, checks it is the signed-in person's, unused and
unexpired, then calls ``approvals.approval_decide``: the same rules as the queue page
(roles, projects, self-approval, four eyes, audit). The link is spent only by a decision
taken; a refused one leaves it as it was.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import transaction
from django.utils import timezone

from sagaboard.approvals.services import approvals
from sagaboard.errors import ServiceError
from sagaboard.models import DecisionLink, User
from sagaboard.notify.services.link_tokens import token_hash, token_read


class LinkRefused(ServiceError):
    """A decision link that cannot be used; ``message`` says why, for the person who opened it."""

    STATUS: ClassVar[dict[str, int]] = {"invalid": 404, "foreign": 403, "used": 410, "expired": 410}

    def __init__(self, code: str, message: str) -> None:
        super().__init__(self.STATUS[code], code, message)


def link_check(*, token: str, user: User, lock: bool = False) -> DecisionLink:
    """The link ``token`` names, if ``user`` may use it now; ``LinkRefused`` says why not."""
    signed = token_read(token)
    if signed is None:
        raise LinkRefused(
            "invalid", "This is not a valid decision link: copy it whole from the mail."
        )
    rows = DecisionLink.objects.select_related("approval__saga__project", "approval__step")
    if lock:
        rows = rows.select_for_update(of=("self",))
    link = rows.filter(pk=signed["l"]).first()
    if link is None or link.token_hash != token_hash(token):
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


def link_decide(*, token: str, user: User, decision: str, reason: str) -> approvals.Outcome:
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

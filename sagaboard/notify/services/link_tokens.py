"""Decision links, the minting side: who gets one, and a fresh signed token for each mail.

Kept apart from ``decision_links`` (which checks and uses them, through ``approvals``) so the
notifications that mail them need not import the approvals service that notifies.
A token is ``django.core.signing`` over (link, approval, user, nonce) with the secret key;
only its SHA-256 is stored, and only when the mail is sent.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.urls import reverse
from django.utils import timezone

from sagaboard.models import Approval, DecisionLink

SALT = "sagaboard.decision-link"


def token_hash(token: str) -> str:
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
    DecisionLink.objects.filter(pk=link.pk).update(token_hash=token_hash(token))
    return token


def link_url(token: str) -> str:
    return f"{settings.SAGABOARD_BASE_URL}{reverse('decision_link', args=[token])}"


def token_read(token: str) -> dict[str, Any] | None:
    """What a token signs, or None when its signature (or its shape) is wrong."""
    try:
        signed = signing.loads(token, salt=SALT)
    except signing.BadSignature:
        return None
    if not isinstance(signed, dict) or not isinstance(signed.get("l"), int):
        return None
    return signed

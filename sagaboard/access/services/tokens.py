"""API tokens: minted once, stored as a prefix and a SHA-256, checked in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.utils import timezone

from sagaboard.models import ApiToken, AuditEntry, Project

TOKEN_PREFIX = "sgb_"


@dataclass(frozen=True)
class MintedToken:
    token: ApiToken
    secret: str = field(repr=False)
    """The whole token: shown once, never stored. Not in the repr: Django's template
    engine logs the whole context at DEBUG when a variable is missing, and tracebacks
    with locals print reprs."""


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def token_create(
    *, project: Project, label: str, acting_user: AbstractBaseUser | None = None
) -> MintedToken:
    prefix = secrets.token_hex(4)
    raw = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        token = ApiToken.objects.create(
            project=project,
            label=label,
            prefix=prefix,
            secret_hash=_digest(raw),
            created_by=acting_user if acting_user and acting_user.pk else None,
        )
        AuditEntry.objects.create(
            project=project,
            user=acting_user if acting_user and acting_user.pk else None,
            actor=_actor(acting_user),
            action="token.create",
            target=f"token:{prefix}",
            data={"label": label},
        )
    return MintedToken(token, raw)


def token_revoke(
    *, token: ApiToken, reason: str = "", acting_user: AbstractBaseUser | None = None
) -> ApiToken:
    with transaction.atomic():
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
        AuditEntry.objects.create(
            project=token.project,
            user=acting_user if acting_user and acting_user.pk else None,
            actor=_actor(acting_user),
            action="token.revoke",
            target=f"token:{token.prefix}",
            reason=reason,
        )
    return token


def token_authenticate(raw: str) -> ApiToken | None:
    """The active token for ``raw``, or None. The hash comparison is constant-time."""
    if not raw.startswith(TOKEN_PREFIX):
        return None
    prefix = raw[len(TOKEN_PREFIX) :].partition("_")[0]
    # Every API request runs this: one plain join, not the ORM's query building.
    t, p = ApiToken._meta.db_table, Project._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT t.id, t.label, t.secret_hash, t.revoked_at IS NULL, p.id, p.slug, p.name, "
            f"t.last_used_at FROM {t} t JOIN {p} p ON p.id = t.project_id WHERE t.prefix = %s",
            [prefix],
        )
        row = cursor.fetchone()
    if row is None or not hmac.compare_digest(row[2], _digest(raw)) or not row[3]:
        return None
    _mark_used(row[0], row[7])
    project = Project(id=row[4], slug=row[5], name=row[6])
    return ApiToken(id=row[0], label=row[1], prefix=prefix, project=project)


def _mark_used(pk: int, last_used: Any) -> None:
    """Keep "last used" (the token page shows it, to tell a dead token from a live one)
    to the minute: one write per token per minute, not one per request."""
    now = timezone.now()
    if isinstance(last_used, str):  # SQLite hands back text from a raw query
        last_used = datetime.fromisoformat(last_used)
    if last_used is not None and timezone.is_naive(last_used):
        last_used = timezone.make_aware(last_used, UTC)
    if last_used is None or now - last_used > timedelta(minutes=1):
        ApiToken.objects.filter(pk=pk).update(last_used_at=now)


def parse_prefix(value: str) -> str:
    """Accept ``sgb_ab12cd34``, ``ab12cd34`` or a whole token; return the prefix."""
    if value.startswith(TOKEN_PREFIX):
        value = value[len(TOKEN_PREFIX) :]
    return value.partition("_")[0]


def _actor(user: AbstractBaseUser | None) -> str:
    return f"user:{user.get_username()}" if user is not None and user.pk else "cli"

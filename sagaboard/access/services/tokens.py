"""API tokens: minted once, stored as a prefix and a SHA-256, checked in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.utils import timezone

from sagaboard.models import ApiToken, ApiTokenVersion, AuditEntry, Project

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
    """The active token for ``raw``, or None. The hash comparison is constant-time.

    Every API request runs this. A token this process has already checked is taken from
    its cache (``_cache``) when the token version (``ApiTokenVersion``: one indexed read)
    has not moved since; any change to any token or project moves it, so a revoked token
    is refused on the next request in every process.
    """
    if not raw.startswith(TOKEN_PREFIX):
        return None
    digest = _digest(raw)
    version = _version()
    hit = _cache.get(digest, version)
    if hit is not None:
        _mark_used(hit)
        return hit.token
    prefix = raw[len(TOKEN_PREFIX) :].partition("_")[0]
    t, p = ApiToken._meta.db_table, Project._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT t.id, t.label, t.secret_hash, t.revoked_at IS NULL, p.id, p.slug, p.name, "
            f"t.last_used_at FROM {t} t JOIN {p} p ON p.id = t.project_id WHERE t.prefix = %s",
            [prefix],
        )
        row = cursor.fetchone()
    if row is None or not hmac.compare_digest(row[2], digest) or not row[3]:
        return None
    project = Project(id=row[4], slug=row[5], name=row[6])
    found = _Checked(ApiToken(id=row[0], label=row[1], prefix=prefix, project=project), row[7])
    _mark_used(found)
    _cache.put(digest, version, found)
    return found.token


class _Checked:
    """A token that authenticated, and when it was last marked used (its row's value)."""

    __slots__ = ("last_used", "token")

    def __init__(self, token: ApiToken, last_used: Any) -> None:
        self.token, self.last_used = token, _aware(last_used)


class _TokenCache:
    """Checked tokens of this process, by the whole token's digest, valid for one version.

    Keyed by the digest, not the prefix: only the same secret finds an entry. An entry
    read under one version is kept only if the cache is still at that version, so a
    request that read a token just before a revocation cannot store it past the move.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version: int | None = None
        self._tokens: dict[str, _Checked] = {}

    def get(self, digest: str, version: int | None) -> _Checked | None:
        if version is None:
            return None
        with self._lock:
            if version != self._version:
                self._version, self._tokens = version, {}
                return None
            return self._tokens.get(digest)

    def put(self, digest: str, version: int | None, checked: _Checked) -> None:
        with self._lock:
            if version is not None and version == self._version:
                if len(self._tokens) >= _CACHE_MAX:
                    self._tokens.clear()  # tokens are few; a flood of them only costs reads
                self._tokens[digest] = checked

    def clear(self) -> None:
        with self._lock:
            self._version, self._tokens = None, {}


_CACHE_MAX = 10_000
_cache = _TokenCache()


def forget_checked_tokens() -> None:
    """Empty this process's token cache (a test's fresh process)."""
    _cache.clear()


def _version() -> int | None:
    """The token version now; a missing row (a flushed database) is made again.

    Made again at a random number, not 0: a process whose cache holds tokens of the
    flushed database under an old number must not find that number again.
    """
    table = ApiTokenVersion._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT number FROM {table} WHERE id = 1")
        row = cursor.fetchone()
    if row is not None:
        return int(row[0])
    ApiTokenVersion.objects.get_or_create(id=1, defaults={"number": secrets.randbits(62)})
    return None  # this request reads the token itself; the next one caches it


def _aware(value: Any) -> datetime | None:
    if isinstance(value, str):  # SQLite hands back text from a raw query
        value = datetime.fromisoformat(value)
    if value is not None and timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    return value


def _mark_used(checked: _Checked) -> None:
    """Keep "last used" (the token page shows it, to tell a dead token from a live one)
    to the minute: one write per token per minute and process, not one per request."""
    now = timezone.now()
    if checked.last_used is None or now - checked.last_used > timedelta(minutes=1):
        checked.last_used = now
        ApiToken.objects.filter(pk=checked.token.pk).update(last_used_at=now)


def parse_prefix(value: str) -> str:
    """Accept ``sgb_ab12cd34``, ``ab12cd34`` or a whole token; return the prefix."""
    if value.startswith(TOKEN_PREFIX):
        value = value[len(TOKEN_PREFIX) :]
    return value.partition("_")[0]


def _actor(user: AbstractBaseUser | None) -> str:
    return f"user:{user.get_username()}" if user is not None and user.pk else "cli"

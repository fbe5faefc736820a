"""Who may watch the live feed: checked at the handshake, and again for as long as it is open.

A websocket outlives the page that opened it, so the session and permissions it was
opened with are not a licence for ever. Three things keep a feed honest:

- **The handshake** refuses a foreign ``Origin`` (scheme, host and port compared, as
  Django's CSRF check does for forms) and a missing session. It accepts, then closes
  with the code, so a browser's ``CloseEvent`` carries the code (a refusal before
  ``accept`` reaches the browser as an HTTP 403 with no code at all).
- **Pushed revocations**: when the app logs a user out, deactivates or deletes them,
  takes them out of a project or a role group, or deletes a project, a message goes to
  the user's (or the project's) group on the channel layer, so the sockets concerned
  re-check at once, on whichever web process they are (Redis carries it between them).
- **A periodic re-check** (``SAGABOARD_LIVE_RECHECK_SECONDS``) of every open socket's
  session and user, deduplicated per session and per user, for changes made behind the
  app's back: a session row deleted, an expiry, SQL run by hand, a process whose
  channel layer reaches no web process.

Close codes (README "Live", docs/security.md):

- ``4401``: not (or no longer) logged in: no session, logged out, session expired or
  deleted, user deactivated or deleted, password changed in another session.
- ``4403``: not (or no longer) allowed: a foreign or missing ``Origin`` at the handshake,
  or the user may no longer see a project the page shows (removed from it, role taken
  away, project deleted).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import import_module
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
)
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission
from django.contrib.sessions.backends.db import SessionStore as DBSessionStore
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http.request import split_domain_port, validate_host
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from django.utils.http import is_same_domain

from sagaboard.access.reads import visible
from sagaboard.live.relay import project_group
from sagaboard.models import Project, User

log = logging.getLogger("sagaboard.live.access")

CLOSE_UNAUTHENTICATED = 4401
"""Not (or no longer) logged in."""
CLOSE_FORBIDDEN = 4403
"""Not (or no longer) allowed: a foreign Origin, or a project the page shows is out of reach."""

ACCESS_CHANGED = "access.changed"
"""The channel-layer message type a revocation sends to a user's or a project's group."""


def user_group(user_pk: int) -> str:
    """Every open socket of one user, on every web process."""
    return f"user.{user_pk}"


def session_tag(session_key: str) -> str:
    """A session named on the channel layer without carrying the key itself (a credential)."""
    return hashlib.sha256(session_key.encode()).hexdigest()[:32]


# ---------------------------------------------------------------- the handshake: Origin


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_parts(origin: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an origin, the port made explicit; None if it is not one."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin1")
    return None


def dashboard_origin(scope: dict[str, Any]) -> tuple[str, str, int] | None:
    """The origin of the dashboard this socket was opened on: its scheme, Host and port.

    The scheme is https with ``SAGABOARD_HTTPS`` (the dashboard is served only over
    TLS, whatever the proxy says on the websocket hop) or on a TLS socket; the Host
    header must be one of ``ALLOWED_HOSTS``, as for every HTTP request.
    """
    host = _header(scope, b"host")
    if not host:
        return None
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    secure = getattr(settings, "SAGABOARD_HTTPS", False) or scope.get("scheme") == "wss"
    return _origin_parts(f"{'https' if secure else 'http'}://{host}")


def origin_allowed(scope: dict[str, Any]) -> bool:
    """Whether the page that opened this socket is the dashboard (or a trusted origin).

    Scheme, host and port must all match: ``http://evil:8000`` and ``https://host:9999``
    are refused for a dashboard at ``http://host:8000``. ``CSRF_TRUSTED_ORIGINS``
    (``SAGABOARD_CSRF_TRUSTED_ORIGINS``) adds origins, ``https://*.example.com``
    included, exactly as for form posts: one list for both. No Origin header is refused:
    browsers always send one, and any other client can send the dashboard's own.
    """
    raw = _header(scope, b"origin")
    origin = _origin_parts(raw) if raw else None
    if origin is None:
        return False
    if origin == dashboard_origin(scope):
        return True
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        scheme, _, netloc = trusted.partition("://")
        if netloc.startswith("*."):
            if origin[0] == scheme.lower() and is_same_domain(
                f"{origin[1]}:{origin[2]}" if ":" in netloc else origin[1],
                netloc[1:].lower(),
            ):
                return True
        elif origin == _origin_parts(trusted):
            return True
    return False


async def refuse(receive: Any, send: Any, code: int) -> None:
    """Accept the handshake, then close with ``code``: the browser sees the code.

    Nothing is sent in between, so accepting first shows nothing to the refused page.
    """
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": code})


class OriginCheck:
    """ASGI middleware: a websocket from a page that is not the dashboard is closed with 4403."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            await refuse(receive, send, CLOSE_FORBIDDEN)
            return None
        return await self.inner(scope, receive, send)


# ---------------------------------------------------------------- who a session is, now


@dataclass(frozen=True)
class Access:
    """What an open socket's session may see at the moment it was checked."""

    user: User | None
    """The logged-in user, or None: the session is over (close with 4401)."""
    projects: frozenset[int]
    """The projects the user may read sagas of (``visible.projects_for_user``)."""


NO_ACCESS = Access(None, frozenset())


def _sessions(keys: set[str]) -> dict[str, dict[str, Any]]:
    """Each live session's data (an expired or deleted one is absent).

    With the database engines (the default; ``cached_db`` too, whose rows are the
    truth) one query for all of them; any other engine loads each one its own way.
    """
    store_class = import_module(settings.SESSION_ENGINE).SessionStore
    if issubclass(store_class, DBSessionStore):
        rows = store_class.get_model_class().objects.filter(
            session_key__in=keys, expire_date__gt=timezone.now()
        )
        decoder = store_class()
        return {k: decoder.decode(d) for k, d in rows.values_list("session_key", "session_data")}
    loaded = {key: dict(store_class(key).items()) for key in keys}
    return {key: data for key, data in loaded.items() if data}


def _users(claims: set[tuple[str, Any]]) -> dict[tuple[str, Any], Any]:
    """(backend path, user id) -> the user that backend returns for the id, or None.

    ``ModelBackend.get_user`` for all of them in one query (the user must exist and
    ``user_can_authenticate``: active); any other backend's ``get_user`` per user.
    """
    plain = {c for c in claims if type(load_backend(c[0])).get_user is ModelBackend.get_user}
    fetched = get_user_model()._default_manager.in_bulk([user_id for _, user_id in plain])
    found: dict[tuple[str, Any], Any] = {}
    for path, user_id in claims:
        backend = load_backend(path)
        if (path, user_id) in plain:
            user = fetched.get(user_id)
            found[path, user_id] = user if user and backend.user_can_authenticate(user) else None
        else:
            found[path, user_id] = backend.get_user(user_id)
    return found


def _hash_verified(user: User, claimed: str | None) -> bool:
    """The session's auth hash is the user's (or made with a fallback secret): as Django's
    ``get_user`` decides, without its side effects (it flushes or re-keys the session,
    which a check must never do)."""
    if not claimed:
        return False
    hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
    return any(constant_time_compare(claimed, h) for h in hashes)


def access_for_sessions(session_keys: Iterable[str]) -> dict[str, Access]:
    """Each session's access now, in a handful of queries however many sessions there are.

    The periodic re-check calls this once per interval for all of a web process's
    sockets: sessions in one query, their users in one, permissions and memberships
    in two or three (``visible.projects_for_users``). The rules are Django's
    ``get_user`` (an active user whose password hash the session still carries) and
    ``visible.projects_visible``.
    """
    keys = set(session_keys)
    user_model = get_user_model()
    claims: dict[str, tuple[str, Any, str | None]] = {}
    for key, data in _sessions({k for k in keys if k}).items():
        try:
            user_id = user_model._meta.pk.to_python(data[SESSION_KEY])
            backend_path = data[BACKEND_SESSION_KEY]
        except (KeyError, ValidationError):
            continue
        if backend_path in settings.AUTHENTICATION_BACKENDS:
            claims[key] = (backend_path, user_id, data.get(HASH_SESSION_KEY))
    users = _users({(path, user_id) for path, user_id, _ in claims.values()})
    verified: dict[str, Any] = {}
    for key, (path, user_id, claimed) in claims.items():
        user = users[path, user_id]
        if user is not None and _hash_verified(user, claimed):
            verified[key] = user
    distinct = list({user.pk: user for user in verified.values()}.values())
    projects = visible.projects_for_users(distinct)
    return {
        key: Access(verified[key], projects[verified[key].pk]) if key in verified else NO_ACCESS
        for key in keys
    }


# ---------------------------------------------------------------- pushed revocations


def _publish(groups: Iterable[str], message: dict[str, Any]) -> None:
    """Send ``message`` to each group; a layer that cannot be reached is logged, not raised.

    The change that caused it is committed already; the periodic re-check is the
    backstop for a message that never arrives.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    for group in groups:
        try:
            async_to_sync(layer.group_send)(group, message)
        except Exception:
            log.warning("could not push a live-feed revocation to %s", group, exc_info=True)


def revoke_after_commit(*, users: Iterable[int] = (), projects: Iterable[int] = ()) -> None:
    """Once the current transaction commits, make those users' (projects') sockets re-check."""
    groups = [user_group(pk) for pk in set(users)] + [project_group(pk) for pk in set(projects)]
    if groups:
        transaction.on_commit(lambda: _publish(groups, _message()))


def _message(**extra: str) -> dict[str, Any]:
    """A revocation; its id lets the sockets of one session that receive it share one check."""
    return {"type": ACCESS_CHANGED, "id": uuid.uuid4().hex, **extra}


def on_logged_out(sender: Any, request: Any, user: User | None, **kwargs: Any) -> None:
    """Logout: the sockets of that session close at once (4401); the user's others re-check."""
    key = getattr(getattr(request, "session", None), "session_key", None)
    if user is None or not key:
        return
    message = _message(ended=session_tag(key))
    # Sent now: the session is flushed right after this signal, and the message names
    # it, so a socket does not need to find it gone in the database.
    _publish([user_group(user.pk)], message)


def on_user_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    """Deactivated, superuser status or password changed: that user's sockets re-check."""
    fields = kwargs.get("update_fields")
    if created or (fields is not None and set(fields) <= {"last_login"}):
        return  # a new user has no socket; a login changes nothing the feed shows
    revoke_after_commit(users=[instance.pk])


def on_user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    revoke_after_commit(users=[instance.pk])


def on_project_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    """Every socket watching the project re-checks (members, and superusers who see all)."""
    revoke_after_commit(projects=[instance.pk])


_REMOVING = {"pre_remove", "pre_clear"}


def on_members_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: set[Any] | None, **kw: Any
) -> None:
    """Someone taken out of a project (from the project's side or the user's)."""
    if action not in _REMOVING:
        return
    if isinstance(instance, Project):
        revoke_after_commit(projects=[instance.pk])
    else:
        revoke_after_commit(users=[instance.pk])


def on_groups_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: set[Any] | None, **kw: Any
) -> None:
    """A role group (or a permission) taken from a user, or a permission from a group."""
    if action not in _REMOVING:
        return
    if isinstance(instance, Group):
        if sender is Group.permissions.through or action == "pre_clear":
            users = list(instance.user_set.values_list("pk", flat=True))
        else:
            users = list(pk_set or ())
    elif isinstance(instance, Permission):  # permission.group_set / permission.user_set
        if sender is Group.permissions.through:
            groups = instance.group_set.all() if action == "pre_clear" else pk_set or ()
            users = list(
                get_user_model().objects.filter(groups__in=groups).values_list("pk", flat=True)
            )
        else:
            users = list(
                instance.user_set.values_list("pk", flat=True)
                if action == "pre_clear"
                else pk_set or ()
            )
    else:
        users = [instance.pk]
    revoke_after_commit(users=users)

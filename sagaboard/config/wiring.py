"""The composition root: the signals that carry news from a lower layer to a higher one.

Only where a direct call cannot work: Django's own signals (a login, a logout, a changed
permission, a migration, a new connection) and infra's "an event was committed on
SQLite", which must wake the live relay above it. Connected once the app registry is
ready (``SagaboardConfig.ready``): a logout or a changed permission reaches the open
websockets, failed logins reach the guard, an event committed on SQLite wakes the live
relay. A lower feature telling a higher one is a direct call down the features' order
instead (the store calls the notifications' outbox itself). Importing this module registers the
admin site's models and the worker's tasks (``jobs`` finds them by name in every process).
"""

from __future__ import annotations

from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.signals import connection_created
from django.db.models.signals import m2m_changed, post_delete, post_migrate, post_save

import sagaboard.ui.admin
import sagaboard.worker.tasks  # noqa: F401
from sagaboard.access.services.login_guard import login_failed, login_succeeded
from sagaboard.config.local_files import prepare_folders
from sagaboard.health.services import overview_rollup
from sagaboard.infra import event_wake
from sagaboard.infra.http.rate_limits import parse_rate
from sagaboard.infra.sqlite_wal import keep_wal_open
from sagaboard.live import access, wake
from sagaboard.models import Event, Project

RATE_SETTINGS = (
    "SAGABOARD_LOGIN_RATE",
    "SAGABOARD_LOGIN_IP_RATE",
    "SAGABOARD_API_AUTH_RATE",
    "SAGABOARD_TOKEN_MINT_RATE",
)


def connect() -> None:
    """Make the embedded default's folders, check the rates, connect every receiver."""
    prepare_folders(settings)  # made here, not at import
    for name in RATE_SETTINGS:  # a mistyped rate fails at start-up, not on the first login
        try:
            parse_rate(getattr(settings, name))
        except ValueError as err:
            raise ImproperlyConfigured(f"{name}: {err}") from err
    user_login_failed.connect(login_failed, dispatch_uid="sagaboard.login_failed")
    user_logged_in.connect(login_succeeded, dispatch_uid="sagaboard.login_succeeded")
    connection_created.connect(keep_wal_open, dispatch_uid="sagaboard.sqlite_wal")
    # A SQLite migration that rebuilds sagaboard_saga drops the overview rollup's triggers.
    post_migrate.connect(
        overview_rollup.after_migrate, sender=apps.get_app_config("sagaboard"),
        dispatch_uid="sagaboard.overview_rollup",
    )  # fmt: skip
    # An event committed on SQLite wakes the live relay at once (PostgreSQL: a trigger's NOTIFY).
    connection_created.connect(
        event_wake.watcher(Event._meta.db_table), weak=False, dispatch_uid="sagaboard.event_wake"
    )
    event_wake.events_committed.connect(wake.on_events_committed, dispatch_uid="sagaboard.wake")
    # Open websockets follow permissions as they change (live.access: pushed revocations).
    user = get_user_model()
    user_logged_out.connect(access.on_logged_out, dispatch_uid="sagaboard.live_logout")
    post_save.connect(access.on_user_saved, sender=user, dispatch_uid="sagaboard.live_u")
    post_delete.connect(access.on_user_deleted, sender=user, dispatch_uid="sagaboard.live_u_del")
    post_delete.connect(
        access.on_project_deleted, sender=Project, dispatch_uid="sagaboard.live_p_del"
    )
    m2m_changed.connect(
        access.on_members_changed,
        sender=Project.members.through,
        dispatch_uid="sagaboard.live_members",
    )
    for through in (user.groups.through, user.user_permissions.through,
                    Group.permissions.through):  # fmt: skip
        m2m_changed.connect(
            access.on_groups_changed, sender=through, dispatch_uid=f"sagaboard.{through}"
        )

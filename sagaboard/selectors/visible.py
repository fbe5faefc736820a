"""Reads, always scoped to what the caller may see (one project for an API token)."""

from __future__ import annotations

import base64
import json
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Prefetch, Q, QuerySet

from sagaboard.infra.limits import BIGINT
from sagaboard.models import Approval, CompensationAttempt, Event, Project, Saga, Step


class BadCursor(ValueError):
    pass


def saga_get_for_project(*, project: Project, saga_id: str) -> Saga | None:
    return (
        Saga.objects.filter(project=project, saga_id=saga_id)
        .select_related("project")
        .prefetch_related(
            Prefetch(
                "steps",
                queryset=Step.objects.order_by("position").prefetch_related(
                    Prefetch("attempts", queryset=CompensationAttempt.objects.order_by("number"))
                ),
            )
        )
        .first()
    )


def encode_cursor(saga: Saga) -> str:
    raw = json.dumps([saga.changed_at.isoformat(), saga.pk]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        updated, pk = json.loads(raw)
        at, pk = datetime.fromisoformat(updated), int(pk)
        # A forged cursor's time or key must still fit the columns it is compared with.
        if at.tzinfo is None or not 0 < pk <= BIGINT:
            raise ValueError("out of range")
        at.astimezone(UTC)
        return at, pk
    except (ValueError, TypeError, OverflowError) as err:
        raise BadCursor("cursor is not one this server issued") from err


def projects_for_user(user: Any) -> list[Project]:
    """The projects a dashboard user may see: their own, or all for a superuser.

    Membership says which projects; a role (the ``viewer`` group or above) says
    whether the user may read sagas at all.
    """
    return list(projects_visible(user).order_by("slug"))


def projects_visible(user: Any) -> QuerySet[Project]:
    """``projects_for_user`` not yet run: to filter by in the caller's own query."""
    if not user.is_authenticated or not user.has_perm("sagaboard.view_saga"):
        return Project.objects.none()
    return Project.objects.all() if user.is_superuser else user.sagaboard_projects.all()


READ_PERMISSION = ("sagaboard", "view_saga")
"""What ``projects_visible`` asks a user for (``sagaboard.view_saga``)."""
_MODEL_BACKEND_ONLY = ["django.contrib.auth.backends.ModelBackend"]


def projects_for_users(users: Sequence[Any]) -> dict[Any, frozenset[int]]:
    """``projects_visible`` for many users at once: user pk -> the pks of their projects.

    For the live feed's periodic re-check of every open socket: a constant number of
    queries (permissions, memberships, and all projects if a superuser is among them)
    instead of four per user. The same rule: an active superuser sees every project;
    anyone else needs the read permission (from a role group or given directly, which
    is what Django's ModelBackend checks) and sees the projects they are a member of.
    With other authentication backends, ``has_perm`` is asked per user instead.
    ``test_live_revocation`` keeps the two equal.
    """
    app_label, codename = READ_PERMISSION
    if list(settings.AUTHENTICATION_BACKENDS) == _MODEL_BACKEND_ONLY:
        asked = [u.pk for u in users if u.is_active and not u.is_superuser]
        granted = Q(user_permissions__codename=codename,
                    user_permissions__content_type__app_label=app_label) | Q(
                    groups__permissions__codename=codename,
                    groups__permissions__content_type__app_label=app_label)  # fmt: skip
        readers = set(
            get_user_model()
            ._default_manager.filter(granted, pk__in=asked)
            .values_list("pk", flat=True)
        )
    else:
        readers = {u.pk for u in users if u.has_perm(f"{app_label}.{codename}")}
    members: dict[Any, set[int]] = {}
    wanted = [u.pk for u in users if u.pk in readers and not u.is_superuser]
    if wanted:
        through = Project.members.through.objects.filter(user_id__in=wanted)
        for user_pk, project_pk in through.values_list("user_id", "project_id"):
            members.setdefault(user_pk, set()).add(project_pk)
    everything: frozenset[int] | None = None
    found: dict[Any, frozenset[int]] = {}
    for user in users:
        if user.is_active and user.is_superuser:
            if everything is None:
                everything = frozenset(Project.objects.values_list("pk", flat=True))
            found[user.pk] = everything
        elif user.pk in readers:
            found[user.pk] = frozenset(members.get(user.pk, ()))
        else:
            found[user.pk] = frozenset()
    return found


def saga_list(
    *,
    projects: Sequence[Project],
    statuses: Sequence[str] = (),
    tool: str | None = None,
    q: str | None = None,
    updated_after: datetime | None = None,
    updated_before: datetime | None = None,
    cursor: str | None = None,
    limit: int = 50,
    outcome: str | None = None,
    waiting: bool = False,
) -> tuple[list[Saga], str | None]:
    """Sagas of ``projects``, newest first, one keyset page; ``BadCursor`` for a forged cursor.

    "Newest" and ``updated_after`` / ``updated_before`` are the server's clock: when it
    last stored a change to the saga (``changed_at``), never the time the agent reported.
    ``outcome``: CLEAN or WITH_EXCEPTIONS (how a rollback came to rest); ``waiting``: only
    sagas whose rollback waits for a person (an approver or an operator).
    """
    if not projects:
        return [], None
    by_pk = {p.pk: p for p in projects}
    # No join on the project (the caller has it): with one, SQLite's planner leaves the
    # (project, -changed_at, -id) index and sorts the whole project in a temp B-tree.
    qs: QuerySet[Saga] = (
        Saga.objects.filter(project=projects[0])
        if len(projects) == 1
        else Saga.objects.filter(project__in=list(by_pk))
    )
    if statuses:
        qs = qs.filter(status__in=list(statuses))
    if outcome:
        qs = qs.filter(outcome=outcome)
    if waiting:
        qs = qs.filter(waiting_for__isnull=False)
    if tool:
        qs = qs.filter(Q(pk__in=Step.objects.filter(tool_name=tool).values("saga_id")))
    if q:
        qs = qs.filter(Q(name__istartswith=q) | Q(saga_id__startswith=q))
    if updated_after:
        qs = qs.filter(changed_at__gt=updated_after)
    if updated_before:
        qs = qs.filter(changed_at__lt=updated_before)
    if cursor:
        updated, pk = decode_cursor(cursor)
        # A row-value comparison walks the index from the cursor on; the equivalent
        # OR of two conditions makes the planner scan from the top of the project.
        table = connection.ops.quote_name(Saga._meta.db_table)
        qs = qs.extra(
            where=[f"({table}.changed_at, {table}.id) < (%s, %s)"],
            params=[connection.ops.adapt_datetimefield_value(updated), pk],
        )
    rows = list(qs.order_by("-changed_at", "-id")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    for row in rows:
        row.project = by_pk[row.project_id]
    return rows, (encode_cursor(rows[-1]) if more and rows else None)


def event_list_for_saga(*, saga: Saga, after: int = 0, limit: int = 500) -> list[Event]:
    """The saga's event log after the log id ``after``, oldest first (a catch-up cursor).

    Without each event's kept change (``Event.change``, for replays): it repeats the
    step's input and output, which pages and the API do not show from here."""
    events = Event.objects.filter(saga=saga, pk__gt=after).defer("change")
    return list(events.order_by("pk")[:limit])


def saga_matches(
    saga: Saga,
    tool_names: Collection[str],
    *,
    status: str | None = None,
    tool: str | None = None,
    q: str | None = None,
    project: str | None = None,
    outcome: str | None = None,
    waiting: str | None = None,
) -> bool:
    """Whether ``saga`` (whose steps use ``tool_names``) belongs on a list filtered this way.

    Pure, so one rendered live row serves every browser's filters without a query each.
    """
    if status and saga.status != status:
        return False
    if outcome and saga.outcome != outcome:
        return False
    if waiting and not saga.waiting_for:
        return False
    if project and saga.project.slug != project:
        return False
    if q and not (saga.name.lower().startswith(q.lower()) or saga.saga_id.startswith(q)):
        return False
    return not tool or tool in tool_names


def last_event_id() -> int:
    """The newest event log id: pages render with it so their live feed resumes from it."""
    return int(Event.objects.order_by("-pk").values_list("pk", flat=True).first() or 0)


def approval_get(*, projects: Sequence[Project], pk: int) -> Approval | None:
    """One approval, pending or decided, if it belongs to one of ``projects`` (a permalink)."""
    if not 0 < pk <= BIGINT:
        return None
    return (
        Approval.objects.filter(pk=pk, saga__project__in=projects)
        .select_related("saga__project")
        .first()
    )

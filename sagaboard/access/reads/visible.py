"""Reads, always scoped to what the caller may see (one project for an API token)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Prefetch, Q, QuerySet

from sagaboard.infra.http.limits import BIGINT
from sagaboard.models import Approval, CompensationAttempt, Event, Project, Saga, Step, Viewer
from sagaboard.search.reads import saga_search

BadCursor = saga_search.BadCursor


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


def saga_for_user(user: Viewer, saga_pk: int, *, lock: bool = False) -> Saga | None:
    """The saga if ``user`` may see it (None otherwise: never whose it is); ``lock``: for
    update, in the caller's transaction."""
    sagas = Saga.objects.select_related("project").filter(
        pk=saga_pk, project__in=projects_visible(user)
    )
    return (sagas.select_for_update(of=("self",)) if lock else sagas).first()


def encode_cursor(saga: Saga, search: saga_search.SagaFilter | None = None) -> str:
    """The list's page link after ``saga`` (newest first unless ``search`` sorts otherwise)."""
    return saga_search.encode_cursor(saga, search)


def projects_for_user(user: Viewer) -> list[Project]:
    """The projects a dashboard user may see: their own, or all for a superuser.

    Membership says which projects; a role (the ``viewer`` group or above) says
    whether the user may read sagas at all.
    """
    return list(projects_visible(user).order_by("slug"))


def projects_visible(user: Viewer) -> QuerySet[Project]:
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
    search: saga_search.SagaFilter | None = None,
    viewer: Viewer | None = None,
) -> tuple[list[Saga], str | None]:
    """Sagas of ``projects``, one keyset page; ``BadCursor`` for a forged cursor.

    ``search`` (``saga_search.parse`` of a list URL) says everything: filters and sort.
    Without it the keywords make one, newest first (the API's filters). "Newest" and
    ``updated_after`` / ``updated_before`` are the server's clock: when it last stored a
    change to the saga (``changed_at``), never the time the agent reported.
    ``outcome``: CLEAN or WITH_EXCEPTIONS (how a rollback came to rest); ``waiting``: only
    sagas whose rollback waits for a person (an approver or an operator). ``viewer``:
    whom "owner: me" means.
    """
    if search is None:
        search = saga_search.SagaFilter(
            statuses=tuple(statuses),
            tool=tool or "",
            q=q or "",
            updated_after=updated_after,
            updated_before=updated_before,
            outcome=outcome or "",
            waiting=waiting,
        )
    return saga_search.page(search, list(projects), cursor=cursor, limit=limit, viewer=viewer)


def saga_row(saga_pk: int) -> Saga:
    """One saga as a list row shows it (``saga_search.with_row_facts``), with its project."""
    saga: Saga = saga_search.with_row_facts(Saga.objects.select_related("project")).get(pk=saga_pk)
    return saga


def saga_rows(
    saga_pks: Collection[int],
) -> dict[int, tuple[Saga, frozenset[str], frozenset[str]]]:
    """Several sagas as ``saga_row`` reads them, with their steps' tool names and errors
    (what ``saga_matches`` decides by): two queries however many (a saga that is gone is
    left out)."""
    rows = saga_search.with_row_facts(Saga.objects.select_related("project"))
    sagas = list(rows.filter(pk__in=saga_pks))
    tools: dict[int, set[str]] = {s.pk: set() for s in sagas}
    errors: dict[int, set[str]] = {s.pk: set() for s in sagas}
    steps = Step.objects.filter(saga_id__in=tools).values_list("saga_id", "tool_name", "error")
    for saga_pk, tool, error in steps:
        tools[saga_pk].add(tool)
        if error:
            errors[saga_pk].add(error)
    return {s.pk: (s, frozenset(tools[s.pk]), frozenset(errors[s.pk])) for s in sagas}


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
    errors: Collection[str] = (),
    status: str | None = None,
    tool: str | None = None,
    q: str | None = None,
    project: str | None = None,
    outcome: str | None = None,
    waiting: str | None = None,
) -> bool:
    """Whether ``saga`` (whose steps use ``tool_names`` and hold ``errors``) belongs on a
    list filtered this way; ``q`` as the search box's plain words (``saga_search``): a name
    or id prefix, or words all found in one step's error.

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
    if q and not (
        saga.name.lower().startswith(q.lower())
        or saga.saga_id.startswith(q)
        or saga_search.error_words_match(q, errors)
    ):
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

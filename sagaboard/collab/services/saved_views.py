"""Saving and deleting a person's list views: checked, then audited like other operator
actions (``AuditEntry``: who, what, when)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.http import QueryDict

from sagaboard.audit.services.audit import actor_of
from sagaboard.errors import ServiceError
from sagaboard.models import AuditEntry, Project, SavedView, User
from sagaboard.search.reads import saga_search

MAX_VIEWS = 100


def save(
    *, user: User, name: str, query: str, shared: bool, projects: Sequence[Project]
) -> SavedView:
    """Save (or replace, by name) ``user``'s view of the list filtered by ``query``.

    The query is parsed as the list parses it and kept in its canonical form, so a saved
    view always opens; it may name only a project of ``projects`` (the user's), and a
    view shared with a project's members must name one.
    """
    name = " ".join(name.split())
    if not name or len(name) > 100:
        raise ServiceError(400, "bad_name", "a name of 1 to 100 characters", "name")
    try:
        search = saga_search.parse(QueryDict(query))
    except saga_search.SearchError as err:
        raise ServiceError(400, "bad_query", str(err), "query") from err
    project = next((p for p in projects if p.slug == search.project), None)
    if search.project and project is None:
        raise ServiceError(400, "bad_query", "project: not one of your projects", "query")
    if shared and project is None:
        raise ServiceError(400, "bad_query", "share a view of one project", "shared")
    canonical = search.to_query().urlencode()
    with transaction.atomic():
        view = SavedView.objects.filter(user=user, name=name).first()
        if view is None and SavedView.objects.filter(user=user).count() >= MAX_VIEWS:
            raise ServiceError(400, "too_many", f"at most {MAX_VIEWS} saved views", "name")
        view = view or SavedView(user=user, name=name)
        view.query, view.project, view.shared = canonical, project, shared
        view.save()
        _audit(user, "view.save", view, {"query": canonical, "shared": shared})
    return view


def delete(*, user: User, view: SavedView) -> None:
    """Delete one of ``user``'s own views (the caller found it among theirs)."""
    with transaction.atomic():
        _audit(user, "view.delete", view, {"query": view.query})
        view.delete()


def _audit(user: User, action: str, view: SavedView, data: dict[str, Any]) -> None:
    AuditEntry.objects.create(
        project=view.project,
        user=user,
        actor=actor_of(user),
        action=action,
        target=f"view:{view.name}"[:200],
        data=data,
    )

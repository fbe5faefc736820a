"""Saved list views a user may open: their own, and those shared in their projects."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Q

from sagaboard.models import Project, SavedView, User


def for_user(user: User, projects: Sequence[Project]) -> list[SavedView]:
    """``user``'s saved views, then the views others shared in one of ``projects`` (the
    user's visible ones): one query. A shared view names its project; one for "all my
    projects" stays its owner's."""
    if not user.is_authenticated:
        return []
    shared = Q(shared=True, project__in=[p.pk for p in projects]) & ~Q(user=user)
    views = SavedView.objects.filter(Q(user=user) | shared).select_related("user")
    return sorted(views, key=lambda v: (v.user_id != user.pk, v.name.lower(), v.pk))


def get_own(user: User, pk: int) -> SavedView | None:
    return SavedView.objects.filter(user=user, pk=pk).first()

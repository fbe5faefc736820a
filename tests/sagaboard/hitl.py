"""Shared setup for the human-in-the-loop tests: people with roles, a server-run StoreBot saga."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission

from sagaboard.demo import storebot_server_saga
from sagaboard.models import Project, Saga, Step
from sagaboard.roles import roles_sync

__all__ = ["person", "states", "storebot_server_saga"]


def person(name: str, role: str, *projects: Project) -> Any:
    user = get_user_model().objects.create_user(name, password=f"pw-{name}-123456")
    if not Group.objects.filter(name=role).exists():
        roles_sync(Group, Permission)  # a transactional test flushed what the migrations made
    user.groups.add(Group.objects.get(name=role))
    for project in projects:
        project.members.add(user)
    return user


def states(saga: Saga) -> dict[str, str]:
    return {s.tool_name: s.state for s in Step.objects.filter(saga=saga)}

"""Shared setup for the human-in-the-loop tests: people with roles, a server-run StoreBot saga,
a one-step saga asking to roll back."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client

from sagaboard.access.services.roles import roles_sync
from sagaboard.actions.services import runner
from sagaboard.demo.flows import storebot_server_saga
from sagaboard.models import Approval, Project, Saga, Step
from sagaboard.record.services import manual_flow

__all__ = ["one_step_saga", "person", "states", "storebot_server_saga"]


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


def one_step_saga(project: Project, undo: dict[str, Any], saga_id: str = "k-1") -> Saga:
    """A saga whose only step completed, then a rollback was asked for."""
    n = iter(range(100))

    def eid() -> str:
        return f"{saga_id}-{next(n)}"

    manual_flow.saga_begin(project=project, event_id=eid(), name="ops", saga_id=saga_id)
    step = manual_flow.step_add(
        project=project, event_id=eid(), saga_id=saga_id, tool_name="create_ticket",
        input={"title": "disk full"}, undo=undo,
    )  # fmt: skip
    manual_flow.step_complete(
        project=project, event_id=eid(), saga_id=saga_id, step_id=step, output={"id": "T-9"}
    )
    manual_flow.saga_rollback_request(
        project=project, event_id=eid(), saga_id=saga_id, reason="test", actor=None
    )
    return Saga.objects.get(project=project, saga_id=saga_id)


def login(role: str, shop: Project, name: str | None = None) -> Client:
    """A client logged in as a new person with ``role`` in ``shop``."""
    client = Client()
    client.force_login(person(name or f"{role}-1", role, shop))
    return client


def waiting(shop: Project, saga_id: str = "s-1") -> Approval:
    """A server-run StoreBot saga rolled back up to its first approval, which is returned."""
    saga = storebot_server_saga(shop, saga_id)
    runner.rollback_continue(saga.pk)
    return Approval.objects.get(saga=saga, status="PENDING")

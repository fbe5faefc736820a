"""Operator actions on the record: an audit entry, and an event on the saga's timeline.

The event row is what makes an action live (the relay reads the event log) and
puts it in the saga's history beside the engine's own events; it has no engine
sequence number (``seq`` is NULL), so it never disturbs the engine's order.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.utils import timezone

from sagaboard.models import AuditEntry, Event, Project, Saga, Step, User, Viewer

_OPERATION: ContextVar[dict[str, Any] | None] = ContextVar(
    "sagaboard_audit_operation", default=None
)


@contextmanager
def operation(**data: Any) -> Iterator[None]:
    """Tag every entry recorded inside the block with ``data`` (a batch job's id): the
    single actions a batch runs through the ordinary services stay tied to the batch."""
    token = _OPERATION.set({**(_OPERATION.get() or {}), **data})
    try:
        yield
    finally:
        _OPERATION.reset(token)


def actor_of(user: Viewer | None) -> str:
    """How a person is named in records: ``user:<username>``."""
    return f"user:{user.get_username()}" if user is not None and user.pk else "system"


def record(
    *,
    user: User | None,
    action: str,
    saga: Saga,
    step: Step | None = None,
    reason: str = "",
    from_state: str | None = None,
    to_state: str,
    data: dict[str, Any] | None = None,
    actor: str | None = None,
) -> AuditEntry:
    """Write the audit entry and the timeline event, in the caller's transaction."""
    who = actor or actor_of(user)
    now = timezone.now()
    data = {**(data or {}), **(_OPERATION.get() or {})}
    target = f"saga:{saga.saga_id}" + (f"/{step.step_id}" if step is not None else "")
    Event.objects.create(
        project_id=saga.project_id,
        saga=saga,
        seq=None,
        client_event_id=f"op:{uuid.uuid4().hex}",
        digest="",
        kind=action,
        step_id=step.step_id if step is not None else None,
        tool_name=step.tool_name if step is not None else None,
        from_state=from_state,
        to_state=to_state,
        at=now,
        actor=who,
        detail=reason or None,
    )
    return AuditEntry.objects.create(
        project_id=saga.project_id,
        user=user if user is not None and user.pk else None,
        actor=who,
        action=action,
        target=target,
        reason=reason,
        data=data or {},
        at=now,
    )


def export_recorded(
    *, user: User, projects: Sequence[Project], what: str, data: dict[str, Any]
) -> list[AuditEntry]:
    """Who exported which sagas (the filter, the format), when: one entry per project
    exported, so each project's admins see it on their audit page."""
    who = actor_of(user)
    now = timezone.now()
    described = ", ".join(f"{k}={v}" for k, v in sorted(data.get("filter", {}).items()))
    entries = [
        AuditEntry(
            project_id=project.pk,
            user=user if user is not None and user.pk else None,
            actor=who,
            action="sagas.export",
            target=f"sagas:{what}",
            reason=f"exported sagas as {what}" + (f" ({described})" if described else ""),
            data=data,
            at=now,
        )
        for project in projects
    ]
    return AuditEntry.objects.bulk_create(entries)

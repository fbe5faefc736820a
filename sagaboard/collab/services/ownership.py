"""Who is on it: a saga's owner ("assign to me / to someone") and acknowledged failures.

An owner is a person of the saga's project who may collaborate (operators, approvers and
admins); assigning, taking over and giving up are each audited (``saga.assign``). To
acknowledge a failed undo is to say "I have seen this one": it marks the failure the
step shows now, so a later failed attempt shows as new again (``Step.acknowledged``).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from sagaboard.access.reads import visible
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.audit.services import audit
from sagaboard.collab.services.notes import PERMISSION
from sagaboard.models import OPERATOR_STATES, Project, Saga, Step, User


def owner_candidates(project: Project) -> QuerySet[Any]:
    """Who may own a saga of ``project``: its active members who may collaborate (by a
    role or directly), and active superusers."""
    users = get_user_model()._default_manager.filter(is_active=True)
    may = Q(groups__permissions__codename="collaborate") | Q(
        user_permissions__codename="collaborate"
    )
    return (
        users.filter(Q(is_superuser=True) | (may & Q(sagaboard_projects=project)))
        .distinct()
        .order_by("username")
    )


def saga_assign(*, user: User, saga_pk: int, assignee: str, reason: str = "") -> Saga:
    """Make ``assignee`` (a username; "" for nobody) the saga's owner."""
    if not user.has_perm(PERMISSION):
        raise DecisionRefused("forbidden", "assigning needs the operator or approver role")
    with transaction.atomic():
        saga = visible.saga_for_user(user, saga_pk, lock=True)
        if saga is None:
            raise DecisionRefused("not_found", "no such saga in your projects")
        new_owner = None
        if assignee:
            new_owner = owner_candidates(saga.project).filter(username=assignee).first()
            if new_owner is None:
                raise DecisionRefused(
                    "validation_error",
                    f"{assignee!r} cannot own sagas of {saga.project.slug}: not a member "
                    "with the operator or approver role",
                    "owner",
                )
        before = saga.owner.get_username() if saga.owner_id else ""
        if saga.owner_id == (new_owner.pk if new_owner else None):
            return saga
        Saga.objects.filter(pk=saga.pk).update(
            owner=new_owner, owner_since=timezone.now() if new_owner else None
        )
        audit.record(
            user=user, action="saga.assign", saga=saga, reason=(reason or "").strip()[:2000],
            from_state=f"OWNER:{before}" if before else "UNOWNED",
            to_state=f"OWNER:{assignee}" if new_owner else "UNOWNED",
            data={"from": before, "to": assignee},
        )  # fmt: skip
    saga.refresh_from_db()
    return saga


def step_acknowledge(*, user: User, step_pk: int) -> Step:
    """Mark the failure a step shows now as seen by ``user`` (a failed or in-doubt undo)."""
    if not user.has_perm(PERMISSION):
        raise DecisionRefused("forbidden", "acknowledging needs the operator or approver role")
    projects = visible.projects_visible(user)
    with transaction.atomic():
        step = (
            Step.objects.select_related("saga__project")
            .select_for_update(of=("self",))
            .filter(pk=step_pk, saga__project__in=projects)
            .first()
        )
        if step is None:
            raise DecisionRefused("not_found", "no such step in your projects")
        if step.state not in OPERATOR_STATES or step.left_at is not None:
            raise DecisionRefused(
                "already_decided", f"{step.step_id} is {step.state}: nothing to acknowledge"
            )
        if step.acknowledged:
            raise DecisionRefused(
                "already_decided", f"{step.acknowledged_by} already acknowledged it"
            )
        actor = audit.actor_of(user)
        now = timezone.now()
        Step.objects.filter(pk=step.pk).update(
            acknowledged_by=actor, acknowledged_at=now, acknowledged_change=step.changed_at
        )
        audit.record(
            user=user, action="step.acknowledge", saga=step.saga, step=step,
            from_state=step.state, to_state="ACKNOWLEDGED",
        )  # fmt: skip
    step.refresh_from_db()
    return step

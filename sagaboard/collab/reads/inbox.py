"""What needs me: approvals I may still vote on, failed undos I may settle, sagas I own,
and (in the inbox, not the badges) rollback requests whose agent has not acted in time.

The navigation's badges count them (``counts``, three capped counts: a badge says "99+"
rather than count a backlog) and the inbox lists them (``items``). Everything is scoped to
the person's projects and to what their roles let them do: a viewer's inbox holds only the
open sagas they own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Q, QuerySet

from sagaboard.access.reads import visible
from sagaboard.engine.reads import rollback_outcomes
from sagaboard.models import Approval, ApprovalStatus, Saga, Step, User
from undo_core import SagaStatus

CAP = 99
"""Counts stop here (the badge shows "99+")."""
LIMIT = 50
"""The inbox lists at most this many of each kind, oldest first."""
SETTLED = (SagaStatus.COMPLETED, SagaStatus.ROLLED_BACK)


@dataclass(frozen=True)
class Counts:
    approvals: int
    failures: int
    assigned: int

    @property
    def total(self) -> int:
        return self.approvals + self.failures + self.assigned


def _approvals(user: User) -> QuerySet[Approval]:
    if not user.has_perm("sagaboard.decide_approval"):
        return Approval.objects.none()
    # Not those of sagas posted with a token the person made: four eyes refuses their vote.
    return (
        Approval.objects.filter(
            status=ApprovalStatus.PENDING, project__in=visible.projects_visible(user)
        )
        .exclude(votes__user=user)
        .exclude(saga__posted_by_token__created_by=user)
    )


def _failures(user: User) -> QuerySet[Step]:
    if not user.has_perm("sagaboard.retry_compensation"):
        return Step.objects.none()
    return Step.objects.filter(
        rollback_outcomes.waits_for_operator(), saga__project__in=visible.projects_visible(user)
    )


def _assigned(user: User) -> QuerySet[Saga]:
    """Sagas the person owns that are not at rest: running, failed, or waiting for someone."""
    return Saga.objects.filter(owner=user, project__in=visible.projects_visible(user)).filter(
        ~Q(status__in=SETTLED) | Q(waiting_for__isnull=False)
    )


def counts(user: User) -> Counts:
    """The badges: each kind counted up to ``CAP`` + 1 (three queries)."""
    if not user.is_authenticated:
        return Counts(0, 0, 0)
    return Counts(
        approvals=_approvals(user).order_by()[: CAP + 1].count(),
        failures=_failures(user).order_by()[: CAP + 1].count(),
        assigned=_assigned(user).order_by()[: CAP + 1].count(),
    )


def _stops_overdue(user: User) -> QuerySet[Saga]:
    """Rollback requests of running sagas that their agents have not carried out in time
    (``actions.services.saga_stop.requests_overdue``): an operator must find out why."""
    if not user.has_perm("sagaboard.request_rollback"):
        return Saga.objects.none()
    return Saga.objects.filter(
        project__in=visible.projects_visible(user),
        status=SagaStatus.IN_PROGRESS,
        rollback_request_overdue_at__isnull=False,
        rollback_request_done_at__isnull=True,
    )


@dataclass(frozen=True)
class Items:
    approvals: list[Approval]
    failures: list[Step]
    assigned: list[Saga]
    stops_overdue: list[Saga] = field(default_factory=list)


def items(user: User) -> Items:
    """The inbox: each kind oldest first (what has waited longest on top)."""
    return Items(
        approvals=list(
            _approvals(user)
            .select_related("saga__project", "step")
            .order_by("created_at", "pk")[:LIMIT]
        ),
        failures=list(
            _failures(user).select_related("saga__project").order_by("changed_at", "pk")[:LIMIT]
        ),
        assigned=list(
            _assigned(user).select_related("project").order_by("owner_since", "pk")[:LIMIT]
        ),
        stops_overdue=list(
            _stops_overdue(user)
            .select_related("project", "rollback_requested_by")
            .order_by("rollback_requested_at", "pk")[:LIMIT]
        ),
    )

"""The rollback outcome kept on each saga row, so lists can filter and count by it.

What the outcome *is* lives in undo_core (``assess_rollback``): this module only
feeds it a saga's stored steps and copies the answer onto the ``Saga`` row's
``outcome``, ``outcome_summary`` and ``waiting_for`` columns. Every path that
changes a saga or a step calls it: ``DjangoStore`` (the engine in a worker or the
manual-flow API), ingestion (events from agents, in bulk) and an operator's
"leave it failed" (``sagaboard.actions.services.operator_actions``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from django.db.models import Q

from sagaboard.models import OPERATOR_STATES, Saga, Step
from undo_core import (
    RollbackAssessment,
    SagaStatus,
    StepFacts,
    StepState,
    WaitingFor,
    assess_rollback,
)

ROLLING = frozenset({SagaStatus.COMPENSATING, SagaStatus.ROLLED_BACK, SagaStatus.ROLLBACK_FAILED})
"""Statuses whose outcome depends on the steps; any other has none (and costs no query)."""

_FACTS = (
    "saga_id", "step_id", "tool_name", "state", "has_undo", "left_at", "decision_note",
    "left_reason",
)  # fmt: skip


def waits_for_operator() -> Q:
    """Steps that wait for an operator: failed or in doubt, and not left failed.

    The one definition the needs-attention page, the overview, /metrics and the
    saga's ``waiting_for`` (undo_core's ``assess_rollback``, ``left``) share.
    """
    return Q(state__in=OPERATOR_STATES, left_at__isnull=True)


def facts(step: Step) -> StepFacts:
    """What undo_core needs of one stored step."""
    return StepFacts(
        step.step_id,
        step.tool_name,
        StepState(step.state),
        bool(step.has_undo),
        step.left_at is not None,
        step.decision_note or step.left_reason,
    )


def _row_facts(row: Mapping[str, Any]) -> StepFacts:
    return StepFacts(
        row["step_id"],
        row["tool_name"],
        StepState(row["state"]),
        bool(row["has_undo"]),
        row["left_at"] is not None,
        row["decision_note"] or row["left_reason"],
    )


def stored_facts(saga_pks: Sequence[int]) -> dict[int, dict[str, StepFacts]]:
    """The steps of these sagas as undo_core reads them, by saga pk then step id (one query)."""
    found: dict[int, dict[str, StepFacts]] = {pk: {} for pk in saga_pks}
    if saga_pks:
        for row in (
            Step.objects.filter(saga_id__in=list(saga_pks)).order_by("position").values(*_FACTS)
        ):
            found[row["saga_id"]][row["step_id"]] = _row_facts(row)
    return found


def columns(status: str, steps: Iterable[StepFacts]) -> dict[str, Any]:
    """The saga row's outcome columns for this status and these steps."""
    return fields(assess_rollback(SagaStatus(status), steps))


def fields(found: RollbackAssessment) -> dict[str, Any]:
    return {
        "outcome": found.outcome.value if found.outcome else None,
        "outcome_summary": found.summary[:200],
        "waiting_for": found.waiting_for.value if found.waiting_for else None,
    }


def assess(saga: Saga) -> RollbackAssessment:
    """The saga's rollback as undo_core reads it from the stored steps (one query; two
    while it waits for an operator).

    A failed undo whose operator's retry waits for its approval makes the saga wait for
    the approver (``WaitingFor.APPROVAL``), as a step awaiting approval does: undo_core
    knows the step only as ROLLBACK_FAILED, the approval is sagaboard's.
    """
    steps = stored_facts([saga.pk])[saga.pk].values() if saga.status in ROLLING else ()
    found = assess_rollback(SagaStatus(saga.status), steps)
    if found.waiting_for is WaitingFor.OPERATOR and retry_awaits_approval(saga.pk):
        found = replace(found, waiting_for=WaitingFor.APPROVAL)
    return found


def retry_awaits_approval(saga_pk: int) -> bool:
    """An operator's retry of one of the saga's failed undos waits for an approver."""
    return Step.objects.filter(
        waits_for_operator(), saga_id=saga_pk, approvals__status="PENDING"
    ).exists()


def refresh(saga: Saga) -> RollbackAssessment:
    """Recompute the saga's outcome columns from its stored steps; write them if they changed."""
    found = assess(saga)
    new = fields(found)
    if any(getattr(saga, k) != v for k, v in new.items()):
        for k, v in new.items():
            setattr(saga, k, v)
        Saga.objects.filter(pk=saga.pk).update(**new)
    return found

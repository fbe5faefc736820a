"""Saga and step states, and the one table of legal transitions.

The seed's names (agent-undo) are kept as the string values so that
``saga.status == "ROLLED_BACK"`` reads as it does there. The states beyond the
seed exist for human-in-the-loop compensation.

Step transitions::

    PENDING ──────────▶ COMPLETED ──▶ COMPENSATING ──▶ ROLLED_BACK
       │                   │               ▲    │
       │                   ▼               │    ▼
       │            AWAITING_APPROVAL ─────┘  ROLLBACK_FAILED ──▶ RESOLVED
       │                   │                    │      ▲
       │                   ▼                    │      │ (retry)
       │               REJECTED                 └──▶ COMPENSATING
       ├──▶ FAILED
       └──▶ IN_DOUBT ──▶ COMPENSATING | RESOLVED

Saga transitions::

    IN_PROGRESS ──▶ COMPLETED ──▶ COMPENSATING
        │  └──────▶ FAILED ─────▶ COMPENSATING
        └─────────────────────▶ COMPENSATING ──▶ ROLLED_BACK | ROLLBACK_FAILED
    ROLLBACK_FAILED ──▶ COMPENSATING (resume) | ROLLED_BACK (last failure settled)
"""

from __future__ import annotations

from enum import StrEnum

from .errors import TransitionError

__all__ = [
    "SAGA_TRANSITIONS",
    "STEP_TRANSITIONS",
    "SagaStatus",
    "StepState",
    "check_saga_transition",
    "check_step_transition",
]


class SagaStatus(StrEnum):
    """Where a saga stands. The first five are agent-undo's."""

    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    ROLLED_BACK = "ROLLED_BACK"
    ROLLBACK_FAILED = "ROLLBACK_FAILED"
    COMPENSATING = "COMPENSATING"
    """A rollback is running (or was running when its process died)."""

    @property
    def ended(self) -> bool:
        """True once the saga accepts no more forward steps."""
        return self is not SagaStatus.IN_PROGRESS and self is not SagaStatus.COMPENSATING


class StepState(StrEnum):
    """Where one step stands. The first five are agent-undo's."""

    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    ROLLED_BACK = "ROLLED_BACK"
    ROLLBACK_FAILED = "ROLLBACK_FAILED"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    """Its undo waits for a human (or policy) to approve it."""
    COMPENSATING = "COMPENSATING"
    """Its undo is running."""
    REJECTED = "REJECTED"
    """An approver refused its undo; the side effect remains, by decision."""
    RESOLVED = "RESOLVED"
    """A human declared the side effect handled by hand."""
    IN_DOUBT = "IN_DOUBT"
    """The process died while the step ran: its effect may or may not exist."""


STEP_TRANSITIONS: dict[StepState, frozenset[StepState]] = {
    StepState.PENDING: frozenset({StepState.COMPLETED, StepState.FAILED, StepState.IN_DOUBT}),
    StepState.COMPLETED: frozenset({StepState.AWAITING_APPROVAL, StepState.COMPENSATING}),
    StepState.AWAITING_APPROVAL: frozenset({StepState.COMPENSATING, StepState.REJECTED}),
    StepState.COMPENSATING: frozenset({StepState.ROLLED_BACK, StepState.ROLLBACK_FAILED}),
    StepState.ROLLBACK_FAILED: frozenset({StepState.COMPENSATING, StepState.RESOLVED}),
    StepState.IN_DOUBT: frozenset({StepState.COMPENSATING, StepState.RESOLVED}),
    StepState.FAILED: frozenset(),
    StepState.ROLLED_BACK: frozenset(),
    StepState.REJECTED: frozenset(),
    StepState.RESOLVED: frozenset(),
}

SAGA_TRANSITIONS: dict[SagaStatus, frozenset[SagaStatus]] = {
    SagaStatus.IN_PROGRESS: frozenset(
        {SagaStatus.COMPLETED, SagaStatus.FAILED, SagaStatus.COMPENSATING}
    ),
    SagaStatus.COMPLETED: frozenset({SagaStatus.COMPENSATING}),
    SagaStatus.FAILED: frozenset({SagaStatus.COMPENSATING}),
    SagaStatus.COMPENSATING: frozenset({SagaStatus.ROLLED_BACK, SagaStatus.ROLLBACK_FAILED}),
    SagaStatus.ROLLBACK_FAILED: frozenset({SagaStatus.COMPENSATING, SagaStatus.ROLLED_BACK}),
    SagaStatus.ROLLED_BACK: frozenset(),
}

#: Steps whose side effect is settled: nothing left for a human to do.
SETTLED_STEP_STATES = frozenset(
    {StepState.FAILED, StepState.ROLLED_BACK, StepState.REJECTED, StepState.RESOLVED}
)


def check_step_transition(current: StepState, requested: StepState, *, step_id: str) -> None:
    """Raise :class:`TransitionError` unless ``current -> requested`` is in the table."""
    if requested not in STEP_TRANSITIONS[current]:
        raise TransitionError(f"step {step_id!r}", current, requested)


def check_saga_transition(current: SagaStatus, requested: SagaStatus, *, saga_id: str) -> None:
    """Raise :class:`TransitionError` unless ``current -> requested`` is in the table."""
    if requested not in SAGA_TRANSITIONS[current]:
        raise TransitionError(f"saga {saga_id!r}", current, requested)

"""How a rollback came to rest: cleanly, or with exceptions a person must know about.

The seed's statuses stay as they are: a saga whose last unsettled step was
rejected by an approver, resolved by hand, or left failed is ``ROLLED_BACK``
(or stays ``ROLLBACK_FAILED``), as in agent-undo. But "rolled back" then does
not mean "every side effect was undone", and a person reading a dashboard, a
metric or a notification must be able to tell the two apart. This module is
the one place that says which it is, from the steps alone:

- :class:`RollbackOutcome` ``CLEAN``: every completed step was undone by its own
  undo; ``WITH_EXCEPTIONS``: at least one was not (each one is a
  :class:`RollbackException` with its :class:`ExceptionKind` and note).
- :class:`WaitingFor`: a rollback that cannot go on until a person acts (an
  approval, or an operator's retry / resolve / leave on a failed or in-doubt undo).

An operator may "leave" a failed undo (undo_core's ``Decision.leave()``; a
dashboard records who and why): the step stays ``ROLLBACK_FAILED`` but no longer
waits for anyone. That is the ``left`` fact of :class:`StepFacts`.

>>> from undo_core import SagaStatus, StepState
>>> steps = [StepFacts("step-1", "return_item", StepState.ROLLED_BACK),
...          StepFacts("step-2", "refund_payment", StepState.REJECTED, note="goodwill")]
>>> found = assess_rollback(SagaStatus.ROLLED_BACK, steps)
>>> found.outcome, found.summary
(<RollbackOutcome.WITH_EXCEPTIONS: 'WITH_EXCEPTIONS'>, '1 rejected')
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from .records import StepSnapshot
from .states import SagaStatus, StepState

__all__ = [
    "ExceptionKind",
    "RollbackAssessment",
    "RollbackException",
    "RollbackOutcome",
    "StepFacts",
    "WaitingFor",
    "assess_rollback",
    "status_text",
    "waiting_text",
]


class RollbackOutcome(StrEnum):
    """How a rollback that came to rest (ROLLED_BACK or ROLLBACK_FAILED) ended."""

    CLEAN = "CLEAN"
    """Every completed step was undone by its own undo."""
    WITH_EXCEPTIONS = "WITH_EXCEPTIONS"
    """At least one side effect was not undone by its undo (see the exceptions)."""


class ExceptionKind(StrEnum):
    """Why one step is an exception to a clean rollback."""

    REJECTED = "rejected"
    """An approver refused its undo: the side effect remains, by decision."""
    RESOLVED = "resolved"
    """A person declared it handled by hand: its undo did not run (or did not succeed)."""
    LEFT = "left"
    """Its undo failed and an operator chose to leave it failed."""
    FAILED = "failed"
    """Its undo failed and waits for an operator."""
    IN_DOUBT = "in_doubt"
    """Its process died while it ran: its effect may or may not exist."""
    NO_UNDO = "no_undo"
    """It completed and has no undo: its side effect remains."""
    NOT_UNDONE = "not_undone"
    """It has an undo that never ran (a halted rollback did not reach it)."""


#: How each kind is counted in a summary ("1 rejected, 2 resolved by hand"), in this order.
KIND_LABELS: dict[ExceptionKind, str] = {
    ExceptionKind.FAILED: "undo failed",
    ExceptionKind.IN_DOUBT: "in doubt",
    ExceptionKind.LEFT: "left failed",
    ExceptionKind.REJECTED: "rejected",
    ExceptionKind.RESOLVED: "resolved by hand",
    ExceptionKind.NO_UNDO: "without undo",
    ExceptionKind.NOT_UNDONE: "not undone",
}

_WHY: dict[ExceptionKind, str] = {
    ExceptionKind.FAILED: "its undo failed and waits for an operator",
    ExceptionKind.IN_DOUBT: "in doubt: its process stopped while it ran",
    ExceptionKind.LEFT: "its undo failed and was left failed",
    ExceptionKind.REJECTED: "an approver rejected its undo; the side effect remains",
    ExceptionKind.RESOLVED: "resolved by hand, not by its undo",
    ExceptionKind.NO_UNDO: "it has no undo; the side effect remains",
    ExceptionKind.NOT_UNDONE: "its undo never ran",
}


class WaitingFor(StrEnum):
    """Who a rollback that cannot go on by itself waits for."""

    APPROVAL = "APPROVAL"
    """An undo waits for an approver's decision."""
    OPERATOR = "OPERATOR"
    """A failed or in-doubt undo waits for an operator: retry, resolve or leave it."""


@dataclass(frozen=True, slots=True)
class StepFacts:
    """What the outcome depends on for one step (a snapshot or a stored row has them all)."""

    id: str
    tool_name: str
    state: StepState
    has_undo: bool = True
    left: bool = False
    """An operator chose to leave its failed undo as it is."""
    note: str | None = None
    """The decision's or the operator's note, when there is one."""

    @classmethod
    def of(cls, step: StepSnapshot, *, left: bool = False, note: str | None = None) -> StepFacts:
        return cls(
            id=step.id,
            tool_name=step.tool_name,
            state=step.state,
            has_undo=step.has_undo,
            left=left,
            note=note if note is not None else step.decision_note,
        )


@dataclass(frozen=True, slots=True)
class RollbackException:
    """One step whose side effect the rollback did not undo by its own undo."""

    step_id: str
    tool_name: str
    kind: ExceptionKind
    note: str | None = None

    @property
    def why(self) -> str:
        """A sentence for a person: what happened to this step's side effect."""
        base = _WHY[self.kind]
        return f"{base} ({self.note})" if self.note else base


@dataclass(frozen=True, slots=True)
class RollbackAssessment:
    """A saga's rollback as a person must read it (:func:`assess_rollback`)."""

    outcome: RollbackOutcome | None
    """None while no rollback has come to rest (running, or none asked for)."""
    exceptions: tuple[RollbackException, ...] = ()
    """Every step not undone by its own undo, oldest step first."""
    waiting_for: WaitingFor | None = None

    @property
    def clean(self) -> bool:
        return self.outcome is RollbackOutcome.CLEAN

    @property
    def counts(self) -> dict[ExceptionKind, int]:
        """How many exceptions of each kind, in summary order."""
        found = Counter(e.kind for e in self.exceptions)
        return {kind: found[kind] for kind in KIND_LABELS if found[kind]}

    @property
    def summary(self) -> str:
        """The exceptions counted by kind: ``"1 rejected, 2 resolved by hand"`` ('' if none)."""
        return ", ".join(f"{n} {KIND_LABELS[kind]}" for kind, n in self.counts.items())


_REST = (SagaStatus.ROLLED_BACK, SagaStatus.ROLLBACK_FAILED)
_ROLLING = (SagaStatus.COMPENSATING, *_REST)
# States whose side effect is settled without an exception (FAILED: the step never ran).
_UNDONE = frozenset({StepState.ROLLED_BACK, StepState.FAILED, StepState.PENDING})
_DECIDED = {
    StepState.REJECTED: ExceptionKind.REJECTED,
    StepState.RESOLVED: ExceptionKind.RESOLVED,
    StepState.IN_DOUBT: ExceptionKind.IN_DOUBT,
}


def _exception(status: SagaStatus, step: StepFacts) -> ExceptionKind | None:
    if step.state in _UNDONE:
        return None
    if step.state in _DECIDED:
        return _DECIDED[step.state]
    if step.state is StepState.ROLLBACK_FAILED:
        return ExceptionKind.LEFT if step.left else ExceptionKind.FAILED
    if step.state is StepState.COMPLETED and not step.has_undo:
        return ExceptionKind.NO_UNDO
    # COMPLETED with an undo, AWAITING_APPROVAL, COMPENSATING: still ahead while the
    # rollback runs; never reached once it has come to rest.
    return ExceptionKind.NOT_UNDONE if status in _REST else None


def assess_rollback(status: SagaStatus, steps: Iterable[StepFacts]) -> RollbackAssessment:
    """How the saga's rollback stands, from its status and its steps.

    A saga that is not rolling back (IN_PROGRESS, COMPLETED, FAILED) has no outcome
    and no exceptions. A COMPENSATING saga has no outcome yet, but the exceptions
    it already has (a rejected undo stays rejected) and whom it waits for, if anyone.
    A ROLLED_BACK saga is ``CLEAN`` only with no exception; ROLLBACK_FAILED never is.
    """
    status = SagaStatus(status)
    if status not in _ROLLING:
        return RollbackAssessment(outcome=None)
    steps = list(steps)
    exceptions = tuple(
        RollbackException(step_id=s.id, tool_name=s.tool_name, kind=kind, note=s.note)
        for s in steps
        if (kind := _exception(status, s)) is not None
    )
    waiting: WaitingFor | None = None
    if status is not SagaStatus.ROLLED_BACK:
        if any(s.state is StepState.AWAITING_APPROVAL for s in steps):
            waiting = WaitingFor.APPROVAL
        elif any(
            s.state in (StepState.ROLLBACK_FAILED, StepState.IN_DOUBT) and not s.left for s in steps
        ):
            waiting = WaitingFor.OPERATOR
    outcome = None
    if status in _REST:
        clean = status is SagaStatus.ROLLED_BACK and not exceptions
        outcome = RollbackOutcome.CLEAN if clean else RollbackOutcome.WITH_EXCEPTIONS
    return RollbackAssessment(outcome=outcome, exceptions=exceptions, waiting_for=waiting)


def status_text(
    status: str, outcome: str | None = None, summary: str = "", waiting_for: str | None = None
) -> str:
    """A saga's status as a person must read it, from what a store or the API keeps.

    ``ROLLED_BACK`` alone only for a clean rollback; otherwise "ROLLED BACK with
    exceptions (1 rejected)". A ROLLBACK_FAILED saga says what it holds ("1 undo
    failed, 1 left failed"), and one that waits for a person says so.
    """
    if status == SagaStatus.ROLLED_BACK and outcome == RollbackOutcome.WITH_EXCEPTIONS:
        text = f"ROLLED BACK with exceptions ({summary or 'see the steps'})"
    elif status == SagaStatus.ROLLBACK_FAILED and summary:
        text = f"{status} ({summary})"
    else:
        text = str(status)
    waiting = waiting_text(waiting_for)
    return f"{text}, {waiting}" if waiting else text


def waiting_text(waiting_for: str | None) -> str:
    """'waiting for a person: an approver' / '...: an operator', or '' when nobody is awaited."""
    if waiting_for == WaitingFor.APPROVAL:
        return "waiting for a person: an approver"
    if waiting_for == WaitingFor.OPERATOR:
        return "waiting for a person: an operator"
    return ""

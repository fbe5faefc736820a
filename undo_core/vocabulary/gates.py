"""Approval gates: who decides before a risky undo runs, and after one fails.

A gate answers two questions, each with a :class:`Decision`:

* ``approve_compensation(request)``: may this undo run? ``APPROVE`` or ``REJECT``,
  or ``WAIT``: nobody has decided yet, so the rollback stops before this undo
  (older steps must not be undone before newer ones) and the saga stays
  COMPENSATING until ``resume_rollback()`` asks again.
* optional ``approval_needed(request)``: asked before an undo that nothing in this
  process flags for approval; a reason string makes it wait for approval like a
  flagged one, ``None`` lets it run (sagaboard's gate asks the server's policies).
  If it raises, the undo does not run unattended: the rollback pauses there.
* ``compensation_failed(request)``: under ``on_compensation_failure="halt"``,
  an undo failed; ``RETRY`` it, ``RESOLVE`` it (handled by hand) or ``LEAVE``
  it for a human and stop the cascade.

The engine asks through :class:`GateQuestions`, the gate's questions as typed
callables, made once when the saga is made: a gate without ``approval_needed``
has ``None`` there, and then every undo nothing flags runs unasked.

A gate may block (or await) for as long as a human takes: sagaboard's SDK
gate waits for an operator's click. If a gate raises, the engine treats it as
"no decision yet": the step stays where it is and the saga ends
ROLLBACK_FAILED, to be resumed later.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from .records import StepSnapshot

__all__ = [
    "APPROVAL_DECISIONS",
    "CARRIED_OUT",
    "STEP_ACTIONS",
    "ApprovalGate",
    "ApprovalRequest",
    "ApprovalScreen",
    "AsyncApprovalGate",
    "AutoApproveGate",
    "Decision",
    "DecisionAction",
    "FailedCompensation",
    "GateQuestions",
]


class DecisionAction(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    RETRY = "retry"
    RESOLVE = "resolve"
    LEAVE = "leave"
    WAIT = "wait"


APPROVAL_DECISIONS: tuple[DecisionAction, ...] = (DecisionAction.APPROVE, DecisionAction.REJECT)
"""What a person answers ``approve_compensation`` (``WAIT`` is nobody having answered yet)."""
STEP_ACTIONS: tuple[DecisionAction, ...] = (
    DecisionAction.RETRY,
    DecisionAction.RESOLVE,
    DecisionAction.LEAVE,
)
"""What an operator answers ``compensation_failed``: the one list of step actions, from which
sagaboard's permissions, API schemas, batch items and buttons are all derived."""
CARRIED_OUT: tuple[DecisionAction, ...] = (DecisionAction.RETRY, DecisionAction.RESOLVE)
"""The step actions the engine carries out (and an agent's SDK acknowledges having done);
``LEAVE`` only stops the cascade, so nothing is left to carry out or acknowledge."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A gate's answer. Use the constructors: ``Decision.approve()``, ``Decision.reject(why)``..."""

    action: DecisionAction
    reason: str | None = None
    actor: str | None = None

    @classmethod
    def approve(cls, *, actor: str | None = None, reason: str | None = None) -> Decision:
        return cls(action=DecisionAction.APPROVE, reason=reason, actor=actor)

    @classmethod
    def reject(cls, reason: str, *, actor: str | None = None) -> Decision:
        if not reason or not reason.strip():
            raise ValueError("a rejection needs a reason")
        return cls(action=DecisionAction.REJECT, reason=reason, actor=actor)

    @classmethod
    def retry(cls, *, actor: str | None = None, reason: str | None = None) -> Decision:
        return cls(action=DecisionAction.RETRY, reason=reason, actor=actor)

    @classmethod
    def resolve(cls, note: str, *, actor: str | None = None) -> Decision:
        if not note or not note.strip():
            raise ValueError("resolving by hand needs a note saying what was done")
        return cls(action=DecisionAction.RESOLVE, reason=note, actor=actor)

    @classmethod
    def wait(cls, *, reason: str | None = None) -> Decision:
        """No decision yet: pause the rollback here (the saga stays COMPENSATING)."""
        return cls(action=DecisionAction.WAIT, reason=reason, actor=None)

    @classmethod
    def leave(cls, *, actor: str | None = None, reason: str | None = None) -> Decision:
        return cls(action=DecisionAction.LEAVE, reason=reason, actor=actor)


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """An undo that needs approval before it runs."""

    saga_id: str
    saga_name: str
    step: StepSnapshot
    why: str
    """Why approval is needed: the tool's flag, the step's flag or the saga's policy."""


@dataclass(frozen=True, slots=True)
class FailedCompensation:
    """An undo that failed, under ``on_compensation_failure="halt"``."""

    saga_id: str
    saga_name: str
    step: StepSnapshot
    error: str
    attempts: int


@runtime_checkable
class ApprovalGate(Protocol):
    """A synchronous gate (for :class:`~undo_core.Saga` and :class:`~undo_core.AsyncSaga`)."""

    def approve_compensation(self, request: ApprovalRequest) -> Decision: ...

    def compensation_failed(self, request: FailedCompensation) -> Decision: ...


@runtime_checkable
class AsyncApprovalGate(Protocol):
    """An asynchronous gate (for :class:`~undo_core.AsyncSaga` only)."""

    async def approve_compensation(self, request: ApprovalRequest) -> Decision: ...

    async def compensation_failed(self, request: FailedCompensation) -> Decision: ...


Screening = str | Awaitable[str | None] | None
"""What ``approval_needed`` returns: a reason, ``None``, or (from an async gate) an awaitable."""


@runtime_checkable
class ApprovalScreen(Protocol):
    """A gate's optional third question: does this undo, which nothing flags, need approval?

    A reason string makes the undo wait for approval like a flagged one; ``None``
    lets it run. An async gate may answer with an awaitable (an ``async def``).
    """

    def approval_needed(self, request: ApprovalRequest) -> Screening: ...


Answer = Decision | Awaitable[Decision]
"""What a gate's question returns: a decision, or (from an async gate) an awaitable of one."""


@dataclass(frozen=True, slots=True)
class GateQuestions:
    """The questions the engine asks a gate, as typed callables (the gate's bound methods).

    ``approval_needed`` is ``None`` for a gate that does not screen undos
    (:class:`ApprovalScreen`): the engine then asks nothing before an undo that
    nothing flags.
    """

    approve_compensation: Callable[[ApprovalRequest], Answer]
    compensation_failed: Callable[[FailedCompensation], Answer]
    approval_needed: Callable[[ApprovalRequest], Screening] | None = None

    @classmethod
    def of(cls, gate: ApprovalGate | AsyncApprovalGate) -> GateQuestions:
        """The questions of ``gate``; :class:`TypeError` if it does not answer the two required."""
        if not (
            isinstance(gate, ApprovalGate)  # the async protocol has the same two names
            and callable(gate.approve_compensation)
            and callable(gate.compensation_failed)
        ):
            raise TypeError(
                "gate must implement ApprovalGate: approve_compensation() and "
                f"compensation_failed(); got {type(gate).__name__}"
            )
        return cls(
            approve_compensation=gate.approve_compensation,
            compensation_failed=gate.compensation_failed,
            approval_needed=gate.approval_needed if isinstance(gate, ApprovalScreen) else None,
        )


class AutoApproveGate:
    """The default: approve every undo, leave every failed undo for a human."""

    def approve_compensation(self, request: ApprovalRequest) -> Decision:
        return Decision.approve(actor="auto")

    def compensation_failed(self, request: FailedCompensation) -> Decision:
        return Decision.leave()


#: A saga-level policy: does this step's undo need approval?
ApprovalPolicy = Callable[[StepSnapshot], bool]

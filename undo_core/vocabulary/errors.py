"""Errors raised by undo_core.

The tree::

    UndoCoreError
    ├── ToolDefinitionError        (also ValueError)   a tool or step defined wrongly
    ├── SagaDefinitionError        (also ValueError)   a declarative saga defined wrongly
    ├── TransitionError            (also RuntimeError) a move the state table forbids
    │   ├── SagaClosedError                            forward work on an ended saga
    │   └── ChangeRefused                              a stored change the record's rules forbid
    ├── StepNotFoundError          (also KeyError)     no step with that id
    ├── SagaNotFoundError          (also KeyError)     no saga with that id in the store
    ├── SagaRollbackError                              a step failed and rollback ran
    │   └── RollbackRequestedError                     an operator asked for the rollback
    ├── StepTimeoutError           (also TimeoutError) execute or undo exceeded its timeout
    ├── GateError                                      an approval gate answered nonsense
    └── StoreError                                     the store could not read or write
        ├── SerializationError     (also TypeError)    a value is not JSON, or not UTF-8 text
        └── LeaseError                                 another process owns the saga

Non-callable ``execute``/``undo``/``run``/``compensate`` raise plain ``TypeError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "ChangeRefused",
    "GateError",
    "LeaseError",
    "RollbackRequestedError",
    "SagaClosedError",
    "SagaDefinitionError",
    "SagaNotFoundError",
    "SagaRollbackError",
    "SerializationError",
    "StepNotFoundError",
    "StepTimeoutError",
    "StoreError",
    "ToolDefinitionError",
    "TransitionError",
    "UndoCoreError",
]


class UndoCoreError(Exception):
    """Base class of every error undo_core raises on purpose."""


class ToolDefinitionError(UndoCoreError, ValueError):
    """A tool was defined with a bad name or option."""


class SagaDefinitionError(UndoCoreError, ValueError):
    """A declarative saga was defined wrongly (no steps, duplicate names...)."""


class TransitionError(UndoCoreError, RuntimeError):
    """The state table does not allow this move; nothing was changed."""

    def __init__(self, subject: str, current: str, requested: str, detail: str = "") -> None:
        self.subject = subject
        self.current = current
        self.requested = requested
        message = f"{subject} cannot go from {current} to {requested}"
        super().__init__(f"{message}: {detail}" if detail else message)


class SagaClosedError(TransitionError):
    """The saga has ended and refuses new steps; the tool was not called."""


class ChangeRefused(TransitionError):
    """A change to a saga's record that :func:`undo_core.check_change` refuses; nothing changed.

    ``rule`` names the rule broken (``illegal_transition``, ``fixed_field``,
    ``stale_event``, ``unknown_step``, ``limit_exceeded``...) and ``field`` the part of
    the change at fault, in the wire format's names (``step.tool_name``,
    ``event.from_state``): a server can answer with both, and a person can act on them.
    """

    def __init__(self, rule: str, field: str, message: str) -> None:
        RuntimeError.__init__(self, message)
        self.rule, self.field = rule, field
        self.subject, self.current, self.requested = field, "", ""

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (multiprocessing) with its names
        return (type(self), (self.rule, self.field, str(self)))


class StepNotFoundError(UndoCoreError, KeyError):
    """No step with that id in this saga."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "step not found"


class SagaNotFoundError(UndoCoreError, KeyError):
    """No saga with that id in the store."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "saga not found"


class StepTimeoutError(UndoCoreError, TimeoutError):
    """``execute`` or ``undo`` ran longer than its timeout."""


class GateError(UndoCoreError):
    """An approval gate returned a decision that does not fit the question."""


class StoreError(UndoCoreError):
    """The store failed to read or write; the change it carried did not happen."""


class SerializationError(StoreError, TypeError):
    """A value of a transition cannot be stored: not JSON, or text that is not Unicode.

    Raised by a store where the value enters (``apply``, in the caller's thread),
    so the engine fails that step by its usual rules. ``saga_id``, ``step_id``
    (``None`` for a saga's own field) and ``field`` (``"input"``, ``"output"``,
    ``"error"``, ``"metadata"``, ``"state"``, ``"options"``...) say where, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        saga_id: str | None = None,
        step_id: str | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.saga_id = saga_id
        self.step_id = step_id
        self.field = field

    def __reduce__(self) -> tuple[Any, ...]:  # keyword arguments survive pickling
        return (_rebuild_serialization_error, (str(self), dict(self.__dict__)))


class LeaseError(StoreError):
    """Another live process holds the saga's lease."""


class SagaRollbackError(UndoCoreError):
    """A step failed and the saga rolled back (cleanly or not: read ``status``).

    ``cause`` (also ``__cause__``) is the error of the failed step.
    ``compensation_cause`` is the first error an undo raised, if any, and
    ``failed_comp_step_name`` the tool name of that step.
    """

    def __init__(
        self,
        message: str,
        *,
        saga_id: str,
        saga_name: str,
        status: str,
        cause: BaseException | None,
        failed_step: str | None,
        failed_step_name: str | None = None,
        compensation_cause: BaseException | None = None,
        failed_comp_step_name: str | None = None,
        failed_comp_step: str | None = None,
        rolled_back: Sequence[str] = (),
        failed: Sequence[str] = (),
        skipped: Sequence[str] = (),
        rejected: Sequence[str] = (),
        unresolved: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.saga_id = saga_id
        self.saga_name = saga_name
        self.status = status
        self.cause = cause
        self.failed_step = failed_step
        self.failed_step_name = failed_step_name
        self.compensation_cause = compensation_cause
        self.failed_comp_step_name = failed_comp_step_name
        self.failed_comp_step = failed_comp_step
        self.rolled_back: tuple[str, ...] = tuple(rolled_back)
        self.failed: tuple[str, ...] = tuple(failed)
        self.skipped: tuple[str, ...] = tuple(skipped)
        self.rejected: tuple[str, ...] = tuple(rejected)
        self.unresolved: tuple[str, ...] = tuple(unresolved)
        self.__cause__ = cause

    def __reduce__(self) -> tuple[Any, ...]:  # keep pickling (multiprocessing) working
        return (_rebuild_rollback_error, (str(self), dict(self.__dict__)))


class RollbackRequestedError(SagaRollbackError):
    """A person asked for this saga's rollback; the engine ran it at a step boundary.

    Raised by ``execute`` *instead of running the step*: the store answered
    ``rollback_requested(saga_id)`` (see :class:`~undo_core.RollbackRequests`),
    so every COMPLETED step was undone newest first, exactly as after a failed
    step (read ``status``, ``rolled_back``, ``unresolved`` as for
    :class:`SagaRollbackError`; ``cause`` and ``failed_step`` are ``None``).
    ``requested_by`` and ``reason`` say who asked and why.
    """

    def __init__(self, message: str, *, requested_by: str, reason: str, **fields: Any) -> None:
        fields.setdefault("cause", None)
        fields.setdefault("failed_step", None)
        super().__init__(message, **fields)
        self.requested_by = requested_by
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_requested_error, (str(self), dict(self.__dict__)))


def _rebuild_requested_error(message: str, state: dict[str, Any]) -> RollbackRequestedError:
    err = RollbackRequestedError.__new__(RollbackRequestedError)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


def _rebuild_rollback_error(message: str, state: dict[str, Any]) -> SagaRollbackError:
    err = SagaRollbackError.__new__(SagaRollbackError)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


def _rebuild_serialization_error(message: str, state: dict[str, Any]) -> SerializationError:
    err = SerializationError(message)
    err.__dict__.update(state)
    return err

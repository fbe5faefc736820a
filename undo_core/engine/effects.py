"""The effects a saga algorithm yields, and the outcomes it gets back.

The engine's algorithms are generators: they yield one of these, the sync or
async driver performs it, and sends back an :class:`Outcome`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, NamedTuple, TypeVar

from ..vocabulary.gates import ApprovalRequest, FailedCompensation

T = TypeVar("T")

__all__ = ["Ask", "Call", "Effect", "Flow", "Outcome", "Sleep"]


class Call(NamedTuple):
    """Effect: call ``fn(*args)`` (maybe async) with an optional timeout."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    timeout: float | None
    what: str
    span: Any = None
    """The call's OpenTelemetry span (``undo_core.tracing``), current while it runs."""


class Ask(NamedTuple):
    """Effect: ask one of the gate's :class:`~undo_core.vocabulary.gates.GateQuestions`."""

    question: Callable[[Any], Any]
    """The gate's bound method; the driver calls it with ``request`` (and awaits, if async)."""
    request: ApprovalRequest | FailedCompensation


class Sleep(NamedTuple):
    """Effect: wait before the next undo attempt."""

    seconds: float


Effect = Call | Ask | Sleep


class Outcome(NamedTuple):
    """What performing an effect gave back to the algorithm."""

    value: Any = None
    error: BaseException | None = None


Flow = Generator[Effect, Outcome | None, T]

"""Tools: a forward action with an optional compensating undo (agent-undo's ``defineTool``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .errors import ToolDefinitionError
from .policies import RetryPolicy

__all__ = [
    "ExecuteContext",
    "Reversibility",
    "Tool",
    "UndoContext",
    "define_tool",
]


class Reversibility(StrEnum):
    """How completely a tool's undo restores the world."""

    REVERSIBLE = "reversible"
    PARTIAL = "partial"
    IRREVERSIBLE = "irreversible"


@dataclass(frozen=True, slots=True)
class ExecuteContext:
    """Handed to ``execute(input, ctx)`` when it accepts a second argument."""

    saga_id: str
    step_id: str
    idempotency_key: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UndoContext:
    """Handed to ``undo(output, input, ctx)`` when it accepts a third argument.

    ``idempotency_key`` is the same for every attempt, in every process, so an
    undo that reaches an outside system can make a repeated call harmless.
    """

    saga_id: str
    step_id: str
    idempotency_key: str
    attempt: int
    actor: str | None = None


def _positional_arity(fn: Callable[..., Any]) -> int:
    """How many positional arguments ``fn`` takes (a large number for ``*args``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature
        return 99
    count = 0
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            return 99
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            count += 1
    return count


def _is_async(fn: Callable[..., Any]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


@dataclass(frozen=True, slots=True)
class Tool:
    """A named action with an optional undo. Build one with :func:`define_tool`."""

    name: str
    execute: Callable[..., Any]
    undo: Callable[..., Any] | None = None
    requires_approval: bool = False
    reversibility: Reversibility = Reversibility.REVERSIBLE
    undo_retry: RetryPolicy = field(default_factory=RetryPolicy)
    execute_timeout: float | None = None
    undo_timeout: float | None = None
    description: str = ""
    execute_takes_context: bool = False
    undo_arity: int = 2
    """1: ``undo(output)``; 2: ``undo(output, input)``; 3: ``undo(output, input, ctx)``."""
    undo_elsewhere: str = ""
    """Why this process cannot run the step's undo although the step has one (it lives in
    another process, e.g. the agent's): a rollback here records that reason as the step's
    ROLLBACK_FAILED error, in words and without a traceback, and never calls anything."""

    is_async: bool = field(init=False)
    """True when ``execute`` or ``undo`` is a coroutine function (computed once)."""
    execute_what: str = field(init=False, repr=False, compare=False)
    """``"<name>.execute"``, how errors name the call (made once, not per step)."""
    undo_what: str = field(init=False, repr=False, compare=False)
    """``"<name>.undo"``."""

    def __post_init__(self) -> None:
        is_async = _is_async(self.execute) or (self.undo is not None and _is_async(self.undo))
        object.__setattr__(self, "is_async", is_async)
        object.__setattr__(self, "execute_what", f"{self.name}.execute")
        object.__setattr__(self, "undo_what", f"{self.name}.undo")

    @property
    def has_undo(self) -> bool:
        return self.undo is not None


def define_tool(
    name: str,
    execute: Callable[..., Any],
    undo: Callable[..., Any] | None = None,
    *,
    requires_approval: bool = False,
    reversibility: Reversibility | str = Reversibility.REVERSIBLE,
    undo_retry: RetryPolicy | None = None,
    execute_timeout: float | None = None,
    undo_timeout: float | None = None,
    description: str = "",
) -> Tool:
    """Define a tool: ``execute(input[, ctx]) -> output`` and ``undo(output, input[, ctx])``.

    The argument order of ``undo`` is the seed's: the output first, then the
    input; an undo that takes one argument gets the output alone. Either may
    be a plain or an ``async`` function. Bad definitions fail here, not at the
    first call.
    """
    if not isinstance(name, str) or not name.strip():
        raise ToolDefinitionError("tool name must be a non-empty string")
    if not callable(execute):
        raise TypeError(f"tool {name!r}: execute must be callable, got {type(execute).__name__}")
    if undo is not None and not callable(undo):
        raise TypeError(f"tool {name!r}: undo must be callable or None, got {type(undo).__name__}")
    try:
        reversibility = Reversibility(reversibility)
    except ValueError:
        choices = ", ".join(r.value for r in Reversibility)
        raise ToolDefinitionError(
            f"tool {name!r}: reversibility must be one of {choices}, got {reversibility!r}"
        ) from None
    for label, value in (("execute_timeout", execute_timeout), ("undo_timeout", undo_timeout)):
        if value is not None and value <= 0:
            raise ToolDefinitionError(f"tool {name!r}: {label} must be > 0 seconds")
    if _positional_arity(execute) < 1:
        raise TypeError(f"tool {name!r}: execute must accept the input as its first argument")
    if undo is not None and _positional_arity(undo) < 1:
        raise TypeError(f"tool {name!r}: undo must accept (output[, input[, ctx]])")
    return Tool(
        name=name,
        execute=execute,
        undo=undo,
        requires_approval=bool(requires_approval),
        reversibility=reversibility,
        undo_retry=undo_retry or RetryPolicy(),
        execute_timeout=execute_timeout,
        undo_timeout=undo_timeout,
        description=description,
        execute_takes_context=_positional_arity(execute) >= 2,
        undo_arity=min(_positional_arity(undo), 3) if undo is not None else 2,
    )

"""What the framework adapters share: one saga step per tool call."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..engine.saga import AsyncSaga, Saga
from ..vocabulary.tools import Tool, define_tool

__all__ = ["TOOL_CALL_ID", "UndoFn", "bind_execute", "define_adapter_tool", "run_step"]

TOOL_CALL_ID = "tool_call_id"
"""The key of ``step.metadata`` that holds the framework's tool call id."""

UndoFn = Callable[..., Any]
"""``undo(output[, input[, ctx]])``, plain or async, as for :func:`~undo_core.define_tool`."""


def _never_called(input: Any) -> Any:  # pragma: no cover - replaced per call
    raise RuntimeError("adapter tool called outside its framework")


async def _never_called_async(input: Any) -> Any:  # pragma: no cover - replaced per call
    raise RuntimeError("adapter tool called outside its framework")


def define_adapter_tool(
    name: str, undo: UndoFn | None, *, is_async: bool, description: str = ""
) -> Tool:
    """The saga-side :class:`Tool` of a framework tool (its undo is checked now).

    Its ``execute`` is a stand-in: each call binds the framework's own
    invocation with :func:`bind_execute`.
    """
    execute = _never_called_async if is_async else _never_called
    return define_tool(name, execute, undo, description=description)


def bind_execute(tool: Tool, execute: Callable[[Any], Any]) -> Tool:
    """``tool`` whose execute is this call's invocation (its undo unchanged)."""
    return dataclasses.replace(tool, execute=execute)


def run_step(saga: Saga | AsyncSaga, tool: Tool, input: Any, tool_call_id: str | None) -> Any:
    """``saga.execute(tool, input)``, recording the tool call id on the step.

    Returns an awaitable for an :class:`AsyncSaga`.
    """
    metadata = {TOOL_CALL_ID: tool_call_id} if tool_call_id is not None else None
    return saga.execute(tool, input, metadata=metadata)

"""PydanticAI adapter: a toolset whose every tool call is a step of an :class:`AsyncSaga`.

    from pydantic_ai import Agent
    from undo_core.adapters.pydantic_ai import SagaToolset

    tools = SagaToolset()

    @tools.tool_plain(undo=lambda booking, args: cancel(booking))
    def book_flight(city: str) -> str: ...

    agent = Agent("openai:gpt-5", toolsets=[tools])
    await agent.run("Book me a flight to Oslo")  # a failing tool rolls back, then raises
    tools.saga.steps  # one step per call; step.metadata["tool_call_id"]

``SagaToolset(existing_toolset, undo={"tool_name": undo_fn})`` wraps any
toolset (MCP servers included). Calls are run one at a time, in the order the
model asked for them, so the steps (and the rollback) have a defined order.
A tool that raises (``ModelRetry`` too) fails its step: the completed steps are
undone newest first and the agent run raises :class:`~undo_core.SagaRollbackError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from ..engine.saga import AsyncSaga
from ..vocabulary.tools import Tool
from ._common import TOOL_CALL_ID, UndoFn, bind_execute, define_adapter_tool, run_step

__all__ = ["TOOL_CALL_ID", "SagaToolset"]


@dataclass
class SagaToolset(WrapperToolset[Any]):
    """Wrap ``wrapped`` (a new :class:`FunctionToolset` by default) so each call is a saga step.

    ``undo`` maps tool names to undo handlers, ``undo(output[, args[, ctx]])``
    where ``args`` is the dict of arguments the model called the tool with.
    ``saga`` is the :class:`AsyncSaga` the steps go to (a new one by default).
    """

    wrapped: AbstractToolset[Any] = field(default_factory=FunctionToolset)
    undo: Mapping[str, UndoFn] = field(default_factory=dict)
    saga: AsyncSaga = field(default_factory=AsyncSaga)
    _tools: dict[str, Tool] = field(default_factory=dict, repr=False, compare=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.undo = dict(self.undo)
        for name, fn in self.undo.items():
            self._tools[name] = define_adapter_tool(name, fn, is_async=True)

    # ------------------------------------------------------------ declaring tools

    def _functions(self) -> FunctionToolset[Any]:
        if not isinstance(self.wrapped, FunctionToolset):
            raise TypeError("tool()/tool_plain() need a SagaToolset over a FunctionToolset")
        return self.wrapped

    def _register(self, name: str | None, undo: UndoFn | None) -> Callable[[Any], Any]:
        def note(func: Any) -> Any:
            tool_name = name or func.__name__
            if undo is not None:
                self.undo = {**self.undo, tool_name: undo}
                self._tools[tool_name] = define_adapter_tool(tool_name, undo, is_async=True)
            return func

        return note

    def tool(self, func: Any = None, /, *, undo: UndoFn | None = None, **options: Any) -> Any:
        """``FunctionToolset.tool`` (the function takes ``RunContext``), with its ``undo``."""
        note = self._register(options.get("name"), undo)
        register = self._functions().tool(**options)
        if func is not None:
            return register(note(func))
        return lambda f: register(note(f))

    def tool_plain(self, func: Any = None, /, *, undo: UndoFn | None = None, **options: Any) -> Any:
        """``FunctionToolset.tool_plain`` (no ``RunContext``), with its ``undo``."""
        note = self._register(options.get("name"), undo)
        functions = self._functions()
        # pydantic-ai 1.x has no tool_plain: its ``tool`` infers whether the function takes ctx.
        register = getattr(functions, "tool_plain", functions.tool)(**options)
        if func is not None:
            return register(note(func))
        return lambda f: register(note(f))

    # ------------------------------------------------------------ calling tools

    def _saga_tool(self, name: str) -> Tool:
        tool = self._tools.get(name)
        if tool is None:
            tool = self._tools[name] = define_adapter_tool(name, None, is_async=True)
        return tool

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        wrapped = self.wrapped

        async def invoke(args: Any) -> Any:
            return await wrapped.call_tool(name, args, ctx, tool)

        step_tool = bind_execute(self._saga_tool(name), invoke)
        async with self._lock:
            return await run_step(self.saga, step_tool, tool_args, ctx.tool_call_id)

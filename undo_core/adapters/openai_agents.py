"""OpenAI Agents SDK adapter: function tools whose every call is a step of an :class:`AsyncSaga`.

    from agents import Agent, Runner
    from undo_core.adapters.openai_agents import AgentsSaga

    undo = AgentsSaga()

    @undo.function_tool(undo=lambda booking, args: cancel(booking))
    def book_flight(city: str) -> str: ...

    agent = Agent(name="travel", tools=[book_flight])
    await Runner.run(agent, "Book me a flight to Oslo")  # a failure rolls back, then raises
    undo.saga.steps  # one step per call; step.metadata["tool_call_id"]

``undo.function_tool`` is the SDK's ``function_tool`` with
``failure_error_function=None``: a tool that raises fails its step, the
completed steps are undone newest first and ``Runner.run`` raises the SDK's
``UserError`` whose ``__cause__`` is the :class:`~undo_core.SagaRollbackError`
(the SDK's default would turn the error into a message for the model, and
nothing would roll back).
``undo.wrap(tool, undo=...)`` wraps an existing :class:`FunctionTool`; make it
with ``failure_error_function=None`` for the same reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import Any

from agents import FunctionTool
from agents import function_tool as sdk_function_tool
from agents.tool_context import ToolContext

from ..engine.saga import AsyncSaga
from ._common import TOOL_CALL_ID, UndoFn, bind_execute, define_adapter_tool, run_step

__all__ = ["TOOL_CALL_ID", "AgentsSaga"]


def _parse(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        return arguments


class AgentsSaga:
    """Make and wrap function tools so each call is a step of :attr:`saga`.

    ``saga`` is the :class:`AsyncSaga` to use; otherwise one is made from
    ``saga_options``. Calls run one at a time (parallel tool calls become
    steps in the order they start), so the rollback order is defined.
    """

    def __init__(self, *, saga: AsyncSaga | None = None, **saga_options: Any) -> None:
        self.saga = saga if saga is not None else AsyncSaga(**saga_options)
        self._lock = asyncio.Lock()

    def wrap(self, tool: FunctionTool, *, undo: UndoFn | None = None) -> FunctionTool:
        """A copy of ``tool`` whose calls are saga steps, undone by ``undo(output[, args[, ctx]])``.

        ``args`` is the dict of arguments the model sent (its raw JSON string
        when it is not valid JSON).
        """
        if not isinstance(tool, FunctionTool):
            raise TypeError(f"AgentsSaga.wrap needs a FunctionTool, got {type(tool).__name__}")
        saga_tool = define_adapter_tool(
            tool.name, undo, is_async=True, description=tool.description
        )
        invoke_tool = tool.on_invoke_tool
        saga, lock = self.saga, self._lock

        async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> Any:
            async def invoke(args: Any) -> Any:
                return await invoke_tool(ctx, arguments)

            step_tool = bind_execute(saga_tool, invoke)
            async with lock:
                return await run_step(saga, step_tool, _parse(arguments), ctx.tool_call_id)

        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)

    def function_tool(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        undo: UndoFn | None = None,
        **options: Any,
    ) -> Any:
        """The SDK's ``@function_tool`` (same options) with an ``undo``; failures raise."""
        options.setdefault("failure_error_function", None)

        def make(f: Callable[..., Any]) -> FunctionTool:
            return self.wrap(sdk_function_tool(f, **options), undo=undo)

        return make(func) if func is not None else make

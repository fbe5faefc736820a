"""LangChain adapter: tools whose every call is a step of a saga.

    from langchain_core.tools import tool
    from undo_core.adapters.langchain import LangChainSaga

    @tool
    def book_flight(city: str) -> str:
        "Book a flight."
        ...

    undo = LangChainSaga()
    tools = [undo.wrap(book_flight, undo=lambda booking, args: cancel(booking))]
    model.bind_tools(tools)  # then tool.invoke(tool_call) in the agent loop
    undo.saga.steps  # one step per call; step.metadata["tool_call_id"]

By default the saga is a :class:`Saga` and the tools are called with
``invoke`` (``ainvoke`` runs them in a worker thread, as LangChain does for
plain tools); ``LangChainSaga(async_=True)`` uses an :class:`AsyncSaga` and
the tools must be called with ``ainvoke``. A tool that raises fails its step,
the completed steps are undone newest first and the call raises
:class:`~undo_core.SagaRollbackError`. Wrap tools whose ``handle_tool_error``
is off: a handled error is a message to the model, not a failure.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.tools import BaseTool
from pydantic import PrivateAttr

from ..engine.saga import AsyncSaga, Saga
from ..vocabulary.tools import Tool
from ._common import TOOL_CALL_ID, UndoFn, bind_execute, define_adapter_tool, run_step

__all__ = ["TOOL_CALL_ID", "LangChainSaga", "SagaTool"]


class SagaTool(BaseTool):
    """A LangChain tool that runs ``inner`` as a saga step (see :meth:`LangChainSaga.wrap`)."""

    inner: BaseTool
    _saga: Saga | AsyncSaga = PrivateAttr()
    _step_tool: Tool = PrivateAttr()
    _owner: LangChainSaga = PrivateAttr()

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # Hand the raw input and the call id to _run/_arun: ``inner`` parses it.
        return (tool_input, tool_call_id), {}

    def _run(
        self,
        tool_input: Any,
        tool_call_id: str | None,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> Any:
        saga = self._saga
        if isinstance(saga, AsyncSaga):
            raise TypeError(f"tool {self.name!r} runs in an AsyncSaga: call it with ainvoke")
        inner = self.inner
        callbacks = run_manager.get_child() if run_manager is not None else None

        def invoke(args: Any) -> Any:
            return inner.run(args, callbacks=callbacks)

        with self._owner._thread_lock:
            return run_step(saga, bind_execute(self._step_tool, invoke), tool_input, tool_call_id)

    async def _arun(
        self,
        tool_input: Any,
        tool_call_id: str | None,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> Any:
        saga = self._saga
        if not isinstance(saga, AsyncSaga):
            sync_manager = run_manager.get_sync() if run_manager is not None else None
            return await asyncio.to_thread(self._run, tool_input, tool_call_id, sync_manager)
        inner = self.inner
        callbacks = run_manager.get_child() if run_manager is not None else None

        async def invoke(args: Any) -> Any:
            return await inner.arun(args, callbacks=callbacks)

        async with self._owner._async_lock:
            return await run_step(
                saga, bind_execute(self._step_tool, invoke), tool_input, tool_call_id
            )


class LangChainSaga:
    """Wrap LangChain tools so each call is a step of :attr:`saga`.

    ``saga`` is the saga to use; otherwise a :class:`Saga` (an
    :class:`AsyncSaga` with ``async_=True``) is made from ``saga_options``.
    Calls run one at a time, so the rollback order is the call order.
    """

    def __init__(
        self, *, saga: Saga | AsyncSaga | None = None, async_: bool = False, **saga_options: Any
    ) -> None:
        if saga is None:
            saga = AsyncSaga(**saga_options) if async_ else Saga(**saga_options)
        self.saga: Saga | AsyncSaga = saga
        self._thread_lock = threading.Lock()
        self._async_lock = asyncio.Lock()

    def wrap(self, tool: BaseTool, *, undo: UndoFn | None = None) -> SagaTool:
        """``tool`` as a saga step, undone by ``undo(output[, args[, ctx]])``.

        ``output`` is what the tool returned (its content) and ``args`` the
        input the model called it with (a dict, or a string for string tools).
        """
        if not isinstance(tool, BaseTool):
            raise TypeError(f"LangChainSaga.wrap needs a BaseTool, got {type(tool).__name__}")
        wrapped = SagaTool(
            name=tool.name,
            description=tool.description,
            args_schema=tool.args_schema,
            return_direct=tool.return_direct,
            inner=tool,
        )
        wrapped._saga = self.saga
        wrapped._owner = self
        wrapped._step_tool = define_adapter_tool(
            tool.name,
            undo,
            is_async=isinstance(self.saga, AsyncSaga),
            description=tool.description,
        )
        return wrapped

    def wrap_all(
        self, tools: Iterable[BaseTool], undo: Mapping[str, UndoFn] | None = None
    ) -> list[SagaTool]:
        """:meth:`wrap` each tool; ``undo`` maps tool names to undo handlers."""
        undo = undo or {}
        return [self.wrap(t, undo=undo.get(t.name)) for t in tools]

"""``wrap_tools``: call tools by name, each call a saga step (agent-undo's ``wrapTools``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..vocabulary.tools import Tool
from .saga import AsyncSaga, Saga

__all__ = ["WrappedTools", "wrap_tools"]


class _Executors:
    """``wrapped.execute.<name>(input)``: attribute access by tool name."""

    def __init__(self, calls: dict[str, Callable[[Any], Any]]) -> None:
        self._calls = calls

    def __getattr__(self, name: str) -> Callable[[Any], Any]:
        try:
            return self._calls[name]
        except KeyError:
            raise AttributeError(
                f"no tool {name!r}; wrapped tools: {', '.join(sorted(self._calls))}"
            ) from None

    def __getitem__(self, name: str) -> Callable[[Any], Any]:
        return self._calls[name]

    def __dir__(self) -> list[str]:
        return sorted(self._calls)


class WrappedTools:
    """The result of :func:`wrap_tools`: ``.execute.<name>(input)`` and ``.saga``."""

    def __init__(self, saga: Saga | AsyncSaga, tools: Mapping[str, Tool]) -> None:
        self.saga = saga
        self.tools = dict(tools)
        self.execute = _Executors({name: self._caller(t) for name, t in self.tools.items()})

    def _caller(self, tool: Tool) -> Callable[[Any], Any]:
        saga = self.saga

        def call(input: Any = None) -> Any:
            return saga.execute(tool, input)

        call.__name__ = tool.name
        call.__doc__ = tool.description or f"Run {tool.name!r} as a step of the saga."
        return call


def wrap_tools(tools: Mapping[str, Tool], **saga_options: Any) -> WrappedTools:
    """Wrap tools so each call is recorded as a saga step and a failure rolls back.

    The saga is an :class:`AsyncSaga` (calls return awaitables) when any tool
    is async, else a :class:`Saga`. ``saga_options`` go to its constructor.
    """
    if not isinstance(tools, Mapping) or not tools:
        raise ValueError("wrap_tools needs a non-empty mapping of name -> Tool")
    for name, tool in tools.items():
        if not isinstance(tool, Tool):
            raise TypeError(f"wrap_tools: {name!r} is not a Tool (use define_tool)")
    saga_class = AsyncSaga if any(t.is_async for t in tools.values()) else Saga
    return WrappedTools(saga_class(**saga_options), tools)

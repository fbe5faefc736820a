"""Run every engine behaviour test against both ``Saga`` and ``AsyncSaga``.

The ``kit`` fixture hands a test the saga class of its mode, a ``tool()``
factory that makes async tools in async mode, and ``run()`` that awaits what
needs awaiting, so one test body pins the behaviour of both drivers.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from undo_core import AsyncSaga, MemoryStore, Saga, SagaStore, SQLiteStore, Tool, define_tool


def _as_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    arity = len(inspect.signature(fn).parameters)
    if arity == 1:

        async def one(a: Any) -> Any:
            return fn(a)

        return one
    if arity == 2:

        async def two(a: Any, b: Any) -> Any:
            return fn(a, b)

        return two

    async def three(a: Any, b: Any, c: Any) -> Any:
        return fn(a, b, c)

    return three


@dataclass
class Kit:
    mode: str

    @property
    def saga_class(self) -> type[Saga] | type[AsyncSaga]:
        return AsyncSaga if self.mode == "async" else Saga

    def saga(self, *args: Any, **kwargs: Any) -> Any:
        return self.saga_class(*args, **kwargs)

    def tool(
        self,
        name: str,
        execute: Callable[..., Any],
        undo: Callable[..., Any] | None = None,
        **options: Any,
    ) -> Tool:
        if self.mode == "async":
            execute = _as_async(execute)
            undo = _as_async(undo) if undo is not None else None
        return define_tool(name, execute, undo, **options)

    @staticmethod
    def run(value: Any) -> Any:
        """Await a coroutine (async mode) or pass a plain value through (sync mode)."""
        if inspect.iscoroutine(value):
            return asyncio.run(value)
        return value


@pytest.fixture(params=["sync", "async"])
def kit(request: pytest.FixtureRequest) -> Kit:
    return Kit(request.param)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SagaStore]:
    """Each store-generic test runs on MemoryStore and SQLiteStore (and, from
    tests/sagaboard/engine/test_django_store.py, on DjangoStore)."""
    if request.param == "memory":
        yield MemoryStore()
        return
    sqlite_store = SQLiteStore(tmp_path / "sagas.db")
    try:
        yield sqlite_store
    finally:
        sqlite_store.close()

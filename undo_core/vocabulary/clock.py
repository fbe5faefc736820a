"""Time, injected so that tests and benchmarks need not sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    """Where the engine reads the time and waits between undo retries."""

    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...

    async def asleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock (UTC)."""

    now: Callable[[], datetime] = staticmethod(partial(datetime.now, UTC))
    """The time now, in UTC (a C call: the engine reads it several times a step)."""

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

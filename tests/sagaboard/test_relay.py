"""The relay's shared cursor: a value from another database never hides new events."""

from __future__ import annotations

import pytest

from sagaboard.realtime import Relay

pytestmark = [pytest.mark.django_db, pytest.mark.asyncio]


class StaleLease:
    """A lease whose shared cursor was left far ahead by another installation."""

    def __init__(self) -> None:
        self.saved: list[int] = []

    async def hold(self) -> bool:
        return True

    async def cursor(self) -> int | None:
        return 10**9

    async def save_cursor(self, log_id: int) -> None:
        self.saved.append(log_id)


async def test_a_cursor_past_the_log_end_is_ignored() -> None:
    relay = Relay(0.01, StaleLease())
    await relay._step()
    assert relay.last_id is not None and relay.last_id < 10**9

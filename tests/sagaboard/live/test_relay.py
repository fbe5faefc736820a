"""The relay's shared cursor: a value from another database never hides new events."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from sagaboard.access.reads.visible import last_event_id
from sagaboard.live.relay import Relay


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


@pytest.mark.django_db
@pytest.mark.asyncio
async def test_a_cursor_past_the_log_end_is_ignored() -> None:
    relay = Relay(0.01, StaleLease())
    await relay._step()
    assert relay.last_id == await database_sync_to_async(last_event_id)()  # the log's end


def test_ids_the_cursor_skipped_are_watched_until_they_show_up_or_expire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sagaboard.live import relay

    gaps = relay.Gaps()
    gaps.add(74, 94)  # a batch still committing when event 95 was relayed
    gaps.found(80)
    assert gaps.current() == [(74, 79), (81, 94)]
    gaps.add(5, 4)  # no gap between consecutive ids
    assert len(gaps.current()) == 2
    clock = relay.time.monotonic() + relay.GAP_SECONDS + 1
    monkeypatch.setattr(relay.time, "monotonic", lambda: clock)
    assert gaps.current() == []  # never committed: a rolled-back transaction

"""Live updates: the event log is the outbox; each web process relays it to its browsers.

An ``Event`` row is committed in the same transaction as the change it
describes, so a change that was rolled back is never shown, and any process
that writes (an API request, a worker, a management command) is seen by every
web process without a broker: each one polls the log for ids above the last
it relayed and sends them to the group of the event's project. Messages carry
ids only; consumers render for their own user. Each message also carries the
id of the previous event of that project, so a consumer that missed one (the
in-memory channel layer drops messages when a buffer fills) notices the gap
and catches up from the log.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db.models import Max

from sagaboard.models import Event

log = logging.getLogger("sagaboard.realtime")

BATCH = 500


def project_group(project_pk: int) -> str:
    return f"project.{project_pk}"


@database_sync_to_async
def _last_event_id() -> int:
    return int(Event.objects.aggregate(top=Max("pk"))["top"] or 0)


@database_sync_to_async
def _events_after(log_id: int) -> list[tuple[int, int, int]]:
    return list(
        Event.objects.filter(pk__gt=log_id)
        .order_by("pk")
        .values_list("pk", "project_id", "saga_id")[:BATCH]
    )


class Relay:
    """Polls the event log and fans new events out to project groups (one per event loop)."""

    def __init__(self, poll_seconds: float) -> None:
        self.poll_seconds = poll_seconds
        self.last_id: int | None = None
        self.last_per_project: dict[int, int] = {}
        self.task: asyncio.Task[None] | None = None

    def ensure_running(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        layer = get_channel_layer()
        assert layer is not None, "CHANNEL_LAYERS is not configured"
        if self.last_id is None:
            self.last_id = await _last_event_id()
        while True:
            try:
                rows = await _events_after(self.last_id)
            except Exception:  # the database blinked: keep the relay alive and retry
                log.exception("event relay could not read the log")
                rows = []
            for log_id, project_pk, saga_pk in rows:
                await layer.group_send(
                    project_group(project_pk),
                    {
                        "type": "saga.event",
                        "project": project_pk,
                        "log_id": log_id,
                        "prev": self.last_per_project.get(project_pk),
                        "saga_pk": saga_pk,
                    },
                )
                self.last_per_project[project_pk] = log_id
                self.last_id = log_id
            if len(rows) < BATCH:
                await asyncio.sleep(self.poll_seconds)


_relays: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Relay] = weakref.WeakKeyDictionary()


def relay(start_after: int | None = None) -> Relay:
    """This event loop's relay, started on first use.

    The first browser's ``after`` (the newest event its page was rendered with)
    is where a new relay starts, so nothing committed between that render and
    the relay's first poll is skipped.
    """
    loop = asyncio.get_running_loop()
    found = _relays.get(loop)
    if found is None:
        found = _relays[loop] = Relay(settings.SAGABOARD_LIVE_POLL_SECONDS)
        found.last_id = start_after
    found.ensure_running()
    return found


def stop_all() -> None:
    """Cancel every relay task (for tests that end their event loop)."""
    for r in list(_relays.values()):
        if r.task is not None:
            r.task.cancel()
    _relays.clear()


__all__: list[Any] = ["Relay", "project_group", "relay", "stop_all"]

"""What the three demos share: the ``--url``/``--token`` options and mirroring to sagaboard.

Kept apart from the demos so each demo file reads as the story it tells, and
so ``undo_core.remote`` (which needs ``httpx``) is imported only when a
sagaboard URL is given: without ``--url`` a demo runs on the standard library.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ..stores.storage import SagaChange, SagaStore
from ..vocabulary.records import EventKind, SagaEvent, SagaSnapshot

if TYPE_CHECKING:
    from ..remote import SagaboardStore  # needs httpx: imported only when a dashboard is given

__all__ = [
    "Tee",
    "add_remote_args",
    "announce_rollback",
    "check_remote_args",
    "dashboard_url",
    "remote_store",
    "say",
]


def say(text: str = "") -> None:
    """Print and flush at once: the crash demo's narrative comes from several processes."""
    print(text, flush=True)


def announce_rollback(event: SagaEvent) -> None:
    """A saga listener: say when the rollback starts, so the undos that follow read in order."""
    if event.kind is EventKind.SAGA and event.to_state == "COMPENSATING":
        say("    -> rolling back the completed steps, newest first (LIFO):")


def add_remote_args(parser: argparse.ArgumentParser) -> None:
    """``--url`` and ``--token``: the optional sagaboard to mirror the demo's sagas to."""
    parser.add_argument(
        "--url",
        help="also post the sagas to the sagaboard at this URL (e.g. http://127.0.0.1:8000)",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("SAGABOARD_TOKEN"),
        help="the project's API token (default: $SAGABOARD_TOKEN)",
    )


def check_remote_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A URL without a token can only fail later, on every request: refuse it up front."""
    if args.url and not args.token:
        parser.error("--url needs a token: pass --token or set SAGABOARD_TOKEN")


@contextmanager
def remote_store(
    url: str | None, token: str | None, *, spool: Path | None = None
) -> Iterator[SagaboardStore | None]:
    """A :class:`SagaboardStore` for ``url`` (``None`` without one), flushed and closed at exit.

    Leaving the block waits for the events to be acknowledged, so the saga is on
    the dashboard by the time the demo prints its link.
    """
    if not url or not token:
        yield None
        return
    from ..remote import SagaboardStore

    with SagaboardStore(url, token, flush_interval=0.01, spool=spool) as store:
        yield store


def dashboard_url(url: str, token: str, saga_id: str) -> str:
    """The saga's page on the dashboard, or the saga list filtered to it.

    The SDK is not told the token's project, so ask the API for the saga (its
    answer names the project); when that fails, the list filtered by id still
    finds it.
    """
    from ..remote import (  # needs httpx: imported only when a dashboard is given
        SagaboardAPIError,
        SagaboardClient,
        SagaboardUnavailable,
    )

    base = url.rstrip("/")
    try:
        with SagaboardClient(base, token) as client:
            project = client.get_saga(saga_id).get("project")
    except (SagaboardAPIError, SagaboardUnavailable):
        project = None
    if isinstance(project, str) and project:
        return f"{base}/sagas/{project}/{saga_id}/"
    return f"{base}/?q={saga_id}"


class Tee:
    """A store that writes to ``primary`` and mirrors each change to ``mirror``.

    The crash demo recovers from its local SQLite file (the primary: reads and
    leases go there only) and also shows the saga live on sagaboard (the mirror).
    A change is written locally first, so a mirror that refuses it never loses
    what recovery needs.
    """

    def __init__(self, primary: SagaStore, mirror: SagaStore) -> None:
        self.primary = primary
        self.mirror = mirror

    def apply(self, change: SagaChange) -> None:
        self.primary.apply(change)
        self.mirror.apply(change)

    def load(self, saga_id: str) -> SagaSnapshot | None:
        return self.primary.load(saga_id)

    def list_unfinished(self) -> list[str]:
        return self.primary.list_unfinished()

    def acquire_lease(
        self, saga_id: str, owner: str, expires_at: datetime, *, expected_owner: str | None
    ) -> bool:
        return self.primary.acquire_lease(saga_id, owner, expires_at, expected_owner=expected_owner)

    def release_lease(self, saga_id: str, owner: str) -> None:
        self.primary.release_lease(saga_id, owner)

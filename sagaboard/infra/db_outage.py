"""Telling a database that is away (or out of disk) from a query that is wrong.

Both answers say "not now, nothing was applied": 503 while the database cannot be
reached or is busy, 507 when its disk is full (SQLite's file, or PostgreSQL's "could not
extend file ... No space left on device"), so an operator reading a log or a client
reading the status knows what to fix. Anything else is a bug and stays a 500.
"""

from __future__ import annotations

from typing import Literal

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError

Outage = Literal["unavailable", "disk_full"]


def retry_disk_full() -> int:
    """Seconds a client waits before retrying a 507 (``SAGABOARD_DISK_FULL_RETRY_AFTER``)."""
    return int(settings.SAGABOARD_DISK_FULL_RETRY_AFTER)


_DISK_FULL = ("database or disk is full", "no space left on device", "disk full")


def outage_of(err: BaseException | None) -> Outage | None:
    """What kind of outage ``err`` (or an error that caused it) reports, if any."""
    while err is not None:
        if isinstance(err, DatabaseError):
            text = str(err).lower()
            if any(words in text for words in _DISK_FULL):
                return "disk_full"
            if isinstance(err, (OperationalError, InterfaceError)):
                return "unavailable"
        err = err.__cause__ or err.__context__
    return None

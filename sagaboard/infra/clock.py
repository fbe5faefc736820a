"""Whose clock says what: the times an agent reports against the times the server records.

An agent's clock is reported, never trusted. Every saga keeps both: ``created_at``
and ``updated_at`` as the agent (or the engine) sent them, and ``received_at`` and
``changed_at`` as this server's own clock read them when it stored the saga and its
latest change. Lists, cursors, "updated in the last ...", charts, retention and the
sweeps use the server's times only (``sagaboard.models.Saga``).

The agent's times are still shown, as reported. When one differs from the server's
matching time by more than ``SAGABOARD_CLOCK_SKEW`` seconds, the pages say so in
words (:class:`ClockSkew`): the agent's clock is wrong, or the change reached the
server late (an SDK that was offline and delivered its spool afterwards looks the
same from here, so the text names both).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils.timesince import timesince

__all__ = ["ClockSkew", "clock_skew", "skew_allowed"]


def skew_allowed() -> timedelta:
    """How far an agent's time may be from the server's before pages warn (the setting)."""
    return timedelta(seconds=settings.SAGABOARD_CLOCK_SKEW)


@dataclass(frozen=True)
class ClockSkew:
    """An agent-reported time that is further from the server's than the allowed skew."""

    which: str
    """What the time is of: ``"created"`` or ``"updated"``."""
    reported: datetime
    """The agent's time, as it reported it."""
    recorded: datetime
    """The server's time for the same moment (when it received or stored it)."""

    @property
    def off_by(self) -> timedelta:
        return abs(self.reported - self.recorded)

    @property
    def direction(self) -> str:
        return "ahead of" if self.reported > self.recorded else "behind"

    @property
    def amount(self) -> str:
        """How far off, in words ("56 years, 1 month")."""
        early, late = sorted((self.reported, self.recorded))
        return timesince(early, late)

    @property
    def title(self) -> str:
        """Both times in one sentence, for a tooltip and for screen readers."""
        return (
            f"The agent reported {self.which} {_utc(self.reported)}; the server recorded "
            f"{_utc(self.recorded)}: {self.amount} {self.direction} the server. Its clock "
            "is wrong, or the change reached the server late."
        )


def clock_skew(
    *,
    created_at: datetime | None,
    updated_at: datetime | None,
    received_at: datetime | None,
    changed_at: datetime | None,
    allowed: timedelta | None = None,
) -> ClockSkew | None:
    """The agent's time furthest from the server's, if it is further than ``allowed``.

    Pairs compared: (``created_at``, ``received_at``) and (``updated_at``, ``changed_at``);
    a missing time is not compared. ``allowed`` defaults to the setting.
    """
    limit = skew_allowed() if allowed is None else allowed
    found = [
        ClockSkew(which, reported, recorded)
        for which, reported, recorded in (
            ("updated", updated_at, changed_at),
            ("created", created_at, received_at),
        )
        if reported is not None and recorded is not None
    ]
    worst = max(found, key=lambda s: s.off_by, default=None)
    return worst if worst is not None and worst.off_by > limit else None


def _utc(moment: datetime) -> str:
    utc = moment.astimezone(UTC)  # the year in four digits: %Y gives "1" on glibc
    return f"{utc.year:04d}-{utc:%m-%d %H:%M:%S} UTC"

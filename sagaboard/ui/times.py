"""Times people trust: every time a page shows says what it is and whose clock it is.

An agent's times are reported, never trusted (README "Times: the server's clock, not the
agent's"); the server's own are what lists order by. A reader must tell them apart at a
glance, so each time is one of the ``KINDS`` below, and the one template tag that draws
times (``{% when t "received" %}``, ``sagaboard.ui.templatetags.sagaboard_time``) labels
it from there. The server writes the exact UTC time; ``static/sagaboard/times.js`` shows
it in the zone the reader chose (UTC or their own, remembered) and how long ago it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

SERVER, AGENT, REPORTED = "server", "agent", "reported"
"""The server's clock; an agent's; the clock of whoever ran the saga (``REPORTED``): the
agent for a saga it runs and mirrors, the server's engine for one sagaboard runs."""

CLOCK_TEXT = {SERVER: "server clock", AGENT: "agent clock"}
TIME_ZONE_COOKIE = "sagaboard_tz"
"""``utc`` (the default) or ``local``: set by times.js with the toggle in the header."""
ZONES = ("utc", "local")


@dataclass(frozen=True)
class Kind:
    what: str
    clock: str


KINDS: dict[str, Kind] = {
    "received": Kind("received", SERVER),
    "changed": Kind("last change", SERVER),
    "step-changed": Kind("step changed", SERVER),
    "began": Kind("began", REPORTED),
    "updated": Kind("updated", REPORTED),
    "event": Kind("happened", REPORTED),
    "reported": Kind("reported", AGENT),
    "undo-started": Kind("undo started", REPORTED),
    "undo-finished": Kind("undo finished", REPORTED),
    "left": Kind("left failed", SERVER),
    "decided": Kind("decided", SERVER),
    "asked": Kind("asked", SERVER),
    "expires": Kind("expires", SERVER),
    "logged": Kind("logged", SERVER),
    "created": Kind("created", SERVER),
    "used": Kind("last used", SERVER),
    "revoked": Kind("revoked", SERVER),
    "written": Kind("written", SERVER),
    "edited": Kind("edited", SERVER),
    "replaced": Kind("replaced", SERVER),
    "assigned": Kind("assigned", SERVER),
    "acknowledged": Kind("acknowledged", SERVER),
    "told": Kind("agent told", SERVER),
    "overdue": Kind("overdue since", SERVER),
    "confirmed": Kind("confirmed", SERVER),
    "finished": Kind("finished", SERVER),
    "heartbeat": Kind("last progress", SERVER),
    "verified": Kind("fully verified", SERVER),
    "item-done": Kind("done", SERVER),
}


class UnknownTimeKind(ValueError):
    """A template named a kind of time this module does not know (a typo fails the page
    in tests, not silently unlabelled)."""


def clock_of(kind: Kind, saga: Any = None) -> str:
    """Whose clock a time of ``kind`` is: a reported time is the agent's unless the
    saga is one sagaboard runs itself (its engine runs on the server)."""
    if kind.clock != REPORTED:
        return kind.clock
    agent_driven = True if saga is None else bool(getattr(saga, "agent_driven", True))
    return AGENT if agent_driven else SERVER


def iso(at: datetime) -> str:
    """A valid ``<time datetime>``: UTC, milliseconds at most (HTML allows three digits), the
    year in four (``1-01-01`` is no HTML time, and a browser reads it as 2001)."""
    utc = at.astimezone(UTC)
    return f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S}.{utc.microsecond // 1000:03d}Z"


def exact_utc(at: datetime, *, precise: bool = False) -> str:
    """``2026-01-31 12:00:05 UTC`` (``precise``: with milliseconds), whatever the zone the
    value came in. The year has four digits (``%Y`` gives ``1`` for year 1 on glibc)."""
    utc = at.astimezone(UTC)
    text = f"{utc.year:04d}-{utc:%m-%d %H:%M:%S}"
    if precise:
        text += f".{utc.microsecond // 1000:03d}"
    return f"{text} UTC"


@dataclass(frozen=True)
class When:
    """What the tag draws for one time."""

    iso: str
    exact: str
    what: str
    clock: str
    clock_text: str
    precise: bool


def when(at: datetime, kind_name: str, *, saga: Any = None, precise: bool = False) -> When:
    kind = KINDS.get(kind_name)
    if kind is None:
        raise UnknownTimeKind(f"no kind of time named {kind_name!r}: one of {sorted(KINDS)}")
    clock = clock_of(kind, saga)
    return When(
        iso=iso(at),
        exact=exact_utc(at, precise=precise),
        what=kind.what,
        clock=clock,
        clock_text=CLOCK_TEXT[clock],
        precise=precise,
    )


def zone_choice(cookies: Any) -> str:
    """The zone the reader chose last (the cookie times.js sets), ``utc`` by default."""
    value = cookies.get(TIME_ZONE_COOKIE, "") if cookies is not None else ""
    return value if value in ZONES else "utc"


def duration_text(seconds: float) -> str:
    """A duration as people say it, on every page (timeline, list, undo attempts, tool
    health): "300 ms", "1.2 s", "12 s", "2 min 5 s", "3 h 10 min"."""
    if seconds < 0.0005:
        return "<1 ms" if seconds > 0 else "0 ms"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        big, small, units = *divmod(whole, 60), ("min", "s")
    elif whole < 86400:
        big, small, units = whole // 3600, whole % 3600 // 60, ("h", "min")
    else:
        big, small, units = whole // 86400, whole % 86400 // 3600, ("d", "h")
    return f"{big} {units[0]} {small} {units[1]}" if small else f"{big} {units[0]}"

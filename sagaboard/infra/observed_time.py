"""How long a row has stayed the same, by this host's monotonic clock, not the wall clock.

A stored time (a lease's expiry, a saga's last change) compared with ``timezone.now()``
is only as good as the wall clock: stepped forward (a VM resumed, NTP correcting a
drift, an operator's ``date -s``), every live worker's lease looks lapsed and its work
orphaned, and the sweep would run an undo a second time while the first is still
running; stepped back, stored times lie in the future and nothing looks stale until
the clock catches up. Where a wrong answer costs a second run, sagaboard asks instead:
has this observer seen the same row, unchanged, for that long?

The sweep names what it saw as a fingerprint (a lease's owner and expiry, a saga's
``seq``); the first sighting starts a count, a change restarts it. The count runs on
``time.monotonic()`` (CLOCK_MONOTONIC: one clock for every process of a host, never
stepped) and is kept in Django's cache, so with ``REDIS_URL`` every worker of the host
adds to the same count; one from another host (or from before a reboot) starts over,
as does one lost with the cache: each of those only delays the pick-up, never hastens it.
"""

from __future__ import annotations

import socket
import time
from functools import cache as once

from django.core.cache import cache

__all__ = ["unchanged_for"]

KEEP_SECONDS = 600
"""How long a sighting is kept without being looked at again (longer than any lease)."""

monotonic = time.monotonic
"""The clock counts run on (tests replace it to move time without the wall clock)."""


@once
def _this_clock() -> str:
    """This host's monotonic clock: its name and boot (a reboot starts the clock again)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "?"
    return f"{socket.gethostname()}/{boot}"


def unchanged_for(key: str, fingerprint: str) -> float:
    """Seconds since this host first saw ``key`` as ``fingerprint`` (0 at first sight).

    Looked at again with another fingerprint, or first by another host, the count starts
    over. A cache that is away (Redis down) answers 0: nothing is judged stale meanwhile.
    """
    now = monotonic()
    name = f"sagaboard:unchanged:{key}"
    seen = cache.get(name)
    if isinstance(seen, tuple) and seen[:2] == (fingerprint, _this_clock()):
        cache.touch(name, KEEP_SECONDS)
        return max(0.0, now - seen[2])
    cache.set(name, (fingerprint, _this_clock(), now), KEEP_SECONDS)
    return 0.0

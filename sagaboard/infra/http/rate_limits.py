"""Counting failures in the cache: how guessing passwords and tokens is slowed down.

A limit is ``count`` failures per ``seconds`` for one key (a username and an IP,
an IP, a user). Counters live in Django's cache, so with ``REDIS_URL`` (Redis as
the cache) every web process sees the same counts; the embedded default's
in-process cache counts per process. Windows are fixed: the count starts again
when the clock reaches the next multiple of ``seconds``, so a key is refused
until then (``Retry-After``). Keys are hashed: an attacker's username never
becomes a cache key as typed.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from dataclasses import dataclass
from functools import lru_cache

from django.core.cache import cache
from django.http import HttpRequest

from sagaboard.errors import ServiceError

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Rate:
    """At most ``count`` failures per fixed window of ``seconds``."""

    count: int
    seconds: int


class RateLimited(ServiceError):
    """Over a limit: try again in ``retry_after`` seconds (429, with ``Retry-After``)."""

    def __init__(self, retry_after: int, what: str = "failed attempts") -> None:
        message = f"too many {what}: retry after {retry_after} s"
        headers = {"Retry-After": str(retry_after)}
        super().__init__(429, "rate_limited", message, headers=headers)
        self.retry_after = retry_after


@lru_cache(maxsize=32)
def parse_rate(text: str) -> Rate | None:
    """``"5/15m"`` -> Rate(5, 900); ``"0"`` or ``"off"`` -> None (no limit).

    Raises ValueError naming the expected form, so a bad setting fails at start-up.
    """
    if text.strip().lower() in ("", "0", "off"):
        return None
    match = _RATE.match(text)
    if match is None or int(match[1]) < 1 or int(match[2]) < 1:
        raise ValueError(f"{text!r} is not a rate: use COUNT/PERIOD, e.g. 5/15m, 60/1m or off")
    return Rate(int(match[1]), int(match[2]) * _UNIT[match[3]])


def _now() -> float:
    return time.time()


def _key(scope: str, ident: str, rate: Rate) -> tuple[str, int]:
    """The counter's cache key for the current window, and the seconds left in it."""
    now = _now()
    window = int(now // rate.seconds)
    digest = hashlib.sha256(ident.encode("utf-8", "replace")).hexdigest()[:32]
    left = max(1, math.ceil((window + 1) * rate.seconds - now))
    return f"ratelimit:{scope}:{rate.seconds}:{window}:{digest}", left


def wait_seconds(scope: str, ident: str, rate: Rate | None) -> int:
    """0 when ``ident`` may try again; otherwise how many seconds it must wait."""
    if rate is None:
        return 0
    key, left = _key(scope, ident, rate)
    return left if (cache.get(key) or 0) >= rate.count else 0


def hit(scope: str, ident: str, rate: Rate | None) -> int:
    """Count one failure (or mint) for ``ident``; returns the count in this window so far."""
    if rate is None:
        return 0
    key, left = _key(scope, ident, rate)
    # add-then-incr is atomic on Redis and on the local-memory cache; the window
    # key outlives its window by a second so a late incr never resurrects it.
    cache.add(key, 0, timeout=left + 1)
    try:
        return int(cache.incr(key))
    except ValueError:  # expired between add and incr: this failure starts the count
        cache.set(key, 1, timeout=left + 1)
        return 1


def reset(scope: str, ident: str, rate: Rate | None) -> None:
    """Forget ``ident``'s count in this window (a person who got it right at last)."""
    if rate is not None:
        cache.delete(_key(scope, ident, rate)[0])


def client_ip(request: HttpRequest) -> str:
    """The client's address as the server saw it.

    Behind a proxy, uvicorn's ``--proxy-headers`` (the Procfile and the systemd
    units use it) has already replaced it with the one in ``X-Forwarded-For``
    from a trusted proxy; a header sent by the client itself is never believed.
    """
    return str(request.META.get("REMOTE_ADDR") or "unknown")

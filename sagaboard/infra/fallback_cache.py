"""Redis as the shared cache, with this process's memory standing in while Redis is away.

What the cache holds here is either rebuilt on a miss (the overview's counts, the audit
page's last check) or only slows attackers down (the rate limits' failure counters).
None of it is worth a 500: an operator must still be able to log in and approve while
Redis restarts. So when a Redis call fails to connect or times out, the same call goes
to a local-memory cache of this process instead, and a warning is logged (at most once
a minute). For ``RETRY_SECONDS`` after a failure the calls go to memory straight away
(a circuit breaker: a request makes many cache calls, and each would wait for
redis-py's own retries), then Redis is tried again. Rate limits count per process
until Redis is back: a limit of 5 failures becomes 5 per web process for that time,
never no limit at all. Values written
during the outage stay local; Redis's own values are used again as soon as it answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger("sagaboard.infra.cache")

_UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError)
_WARN_EVERY = 60.0
RETRY_SECONDS = 5.0
_OPERATIONS = (
    "add", "get", "set", "touch", "delete", "get_many", "has_key", "incr", "decr",
    "set_many", "delete_many", "clear",
)  # fmt: skip


class FallbackRedisCache(RedisCache):
    """``django.core.cache.backends.redis.RedisCache`` that never fails a request over Redis."""

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        options = {k: v for k, v in params.items() if k in ("TIMEOUT", "KEY_PREFIX", "VERSION")}
        self._local = LocMemCache(f"sagaboard-fallback-{id(self)}", options)
        self._warned_at = 0.0
        self._down_until = 0.0

    def _fallback(self, name: str, err: BaseException) -> Callable[..., Any]:
        now = time.monotonic()
        self._down_until = now + RETRY_SECONDS
        if now - self._warned_at > _WARN_EVERY:
            self._warned_at = now
            log.warning(
                "the Redis cache is unavailable (%s: %s); using this process's memory "
                "until it answers (rate limits count per process meanwhile)",
                type(err).__name__, err,
            )  # fmt: skip
        return getattr(self._local, name)  # type: ignore[no-any-return]


def _guarded(name: str) -> Callable[..., Any]:
    def call(self: FallbackRedisCache, *args: Any, **kwargs: Any) -> Any:
        if time.monotonic() < self._down_until:
            return getattr(self._local, name)(*args, **kwargs)
        try:
            return getattr(RedisCache, name)(self, *args, **kwargs)
        except _UNAVAILABLE as err:
            return self._fallback(name, err)(*args, **kwargs)

    call.__name__ = name
    call.__doc__ = getattr(RedisCache, name).__doc__
    return call


for _name in _OPERATIONS:
    setattr(FallbackRedisCache, _name, _guarded(_name))

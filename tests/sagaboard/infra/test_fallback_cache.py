"""The Redis cache never fails a request: while Redis is away, this process's memory stands in
(so an operator can still log in and approve), and Redis is used again once it answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import ConnectionError as RedisConnectionError

from sagaboard.infra import fallback_cache
from sagaboard.infra.fallback_cache import FallbackRedisCache
from sagaboard.infra.http import rate_limits
from tests.support.fault_services import RedisProcess
from tests.support.live_server import free_port

pytestmark = pytest.mark.slow  # a redis-server of its own


@pytest.fixture
def redis_server() -> Iterator[RedisProcess]:
    with RedisProcess() as server:
        yield server


def cache_on(port: int) -> FallbackRedisCache:
    return FallbackRedisCache(
        f"redis://127.0.0.1:{port}/0",
        {"KEY_PREFIX": "t", "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}},
    )


def test_values_live_in_redis_while_it_answers(redis_server: Any) -> None:
    one, two = cache_on(redis_server.port), cache_on(redis_server.port)
    one.set("k", 41)
    assert two.incr("k") == 42  # another process's cache sees the same value


def test_while_redis_is_down_calls_go_to_memory_and_redis_is_used_when_back(
    redis_server: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(fallback_cache, "RETRY_SECONDS", 0.0)
    cache = cache_on(redis_server.port)
    cache.set("k", "from redis")
    redis_server.stop()

    assert cache.get("k") is None  # Redis's value is out of reach, not an error
    assert cache.add("n", 0) and cache.incr("n") == 1
    assert "the Redis cache is unavailable" in caplog.text

    redis_server.start()  # empty again: the server keeps nothing on disk
    cache.set("k", "back")
    assert cache_on(redis_server.port).get("k") == "back"


def test_rate_limits_still_count_per_process_while_redis_is_down(
    redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = cache_on(redis_server.port)
    monkeypatch.setattr(rate_limits, "cache", cache)
    rate = rate_limits.Rate(count=3, seconds=600)
    redis_server.stop()
    for _ in range(3):
        rate_limits.hit("login", "ann|10.0.0.1", rate)
    assert rate_limits.wait_seconds("login", "ann|10.0.0.1", rate) > 0


def test_after_a_failure_redis_is_not_asked_again_for_a_few_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def refused(self: Any, key: str, *args: Any, **kwargs: Any) -> None:
        asked.append(key)
        raise RedisConnectionError("Connection refused")

    monkeypatch.setattr(RedisCache, "set", refused)
    cache = cache_on(free_port())
    for n in range(50):
        cache.set(f"k{n}", n)
    assert cache.get("k49") == 49
    assert asked == ["k0"]  # one failed call, then memory: not 50 waits for Redis

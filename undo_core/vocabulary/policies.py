"""Retry policy for undo handlers (and the timeouts beside it)."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often to try an undo before it counts as ROLLBACK_FAILED.

    The default, one attempt, is agent-undo's behaviour. Delays grow as
    ``initial_interval * backoff ** (attempt - 1)``, capped at ``max_interval``,
    with up to ``jitter`` (a fraction) added at random so that many sagas
    failing together do not retry in lockstep.
    """

    max_attempts: int = 1
    initial_interval: float = 0.5
    backoff: float = 2.0
    max_interval: float = 30.0
    jitter: float = 0.1
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    """Only errors of these types are retried."""
    non_retryable: tuple[type[BaseException], ...] = ()
    """Errors of these types fail at once, even if ``retry_on`` matches them."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be >= 1")
        if self.initial_interval < 0 or self.max_interval < 0:
            raise ValueError("RetryPolicy intervals must be >= 0")
        if self.backoff < 1:
            raise ValueError("RetryPolicy.backoff must be >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("RetryPolicy.jitter must be between 0 and 1")

    def should_retry(self, error: BaseException, attempt: int) -> bool:
        """Whether to try again after ``attempt`` (1-based) failed with ``error``."""
        if attempt >= self.max_attempts or isinstance(error, self.non_retryable):
            return False
        return isinstance(error, self.retry_on)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        base = min(self.initial_interval * self.backoff ** (attempt - 1), self.max_interval)
        return base * (1 + self.jitter * (rng or random).random())

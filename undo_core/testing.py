"""Helpers for testing code that uses undo_core (shipped, like ``structlog.testing``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from .vocabulary.gates import ApprovalRequest, Decision, FailedCompensation

__all__ = ["FakeClock", "ScriptedGate"]


class FakeClock:
    """A clock that only moves when told to; ``sleep`` advances it instantly."""

    def __init__(self, start: datetime | None = None) -> None:
        self.current = start or datetime(2026, 1, 1, tzinfo=UTC)
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


class ScriptedGate:
    """A gate that answers from scripts, and remembers what it was asked.

    ``approvals`` and ``failures`` are consumed in order; when a script runs
    out, the gate approves undos and leaves failures for a human.
    """

    def __init__(
        self, approvals: Iterable[Decision] = (), failures: Iterable[Decision] = ()
    ) -> None:
        self._approvals = deque(approvals)
        self._failures = deque(failures)
        self.approval_requests: list[ApprovalRequest] = []
        self.failure_requests: list[FailedCompensation] = []

    def approve_compensation(self, request: ApprovalRequest) -> Decision:
        self.approval_requests.append(request)
        return self._approvals.popleft() if self._approvals else Decision.approve()

    def compensation_failed(self, request: FailedCompensation) -> Decision:
        self.failure_requests.append(request)
        return self._failures.popleft() if self._failures else Decision.leave()

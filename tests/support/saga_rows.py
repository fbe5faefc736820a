"""Sagas, steps and undo attempts written straight as rows, with chosen times.

For tests of reads over stored data (rollups, exports) that need exact durations and
buckets: no engine, no event log. Times are UTC datetimes; ``changed_at`` (the server's
clock) defaults to the step's last time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from sagaboard.models import CompensationAttempt, Project, Saga, Step


@dataclass
class StepSpec:
    tool: str
    state: str = "COMPLETED"
    ms: float | None = 100.0
    """Forward duration; None leaves completed_at empty."""
    undo_ms: list[tuple[float, str]] = field(default_factory=list)
    """(duration, outcome) per undo attempt."""


def make_saga(
    project: Project,
    saga_id: str,
    steps: list[StepSpec],
    *,
    at: datetime | None = None,
    status: str = "COMPLETED",
    name: str = "order",
    changed_at: datetime | None = None,
    failed_step: str | None = None,
) -> Saga:
    """One saga whose steps start at ``at`` one second apart."""
    at = at or timezone.now() - timedelta(minutes=1)
    changed = changed_at or timezone.now()
    saga = Saga.objects.create(project=project, saga_id=saga_id, name=name, status=status,
                               created_at=at, updated_at=at + timedelta(seconds=len(steps)),
                               changed_at=changed, failed_step=failed_step)  # fmt: skip
    for n, spec in enumerate(steps, start=1):
        start = at + timedelta(seconds=n - 1)
        end = None if spec.ms is None else start + timedelta(milliseconds=spec.ms)
        step = Step.objects.create(
            saga=saga, step_id=f"step-{n}", position=n, tool_name=spec.tool, state=spec.state,
            idempotency_key=f"{saga_id}:{n}", created_at=start,
            updated_at=end, completed_at=None if spec.state == "FAILED" else end,
            changed_at=changed,
        )  # fmt: skip
        for k, (ms, outcome) in enumerate(spec.undo_ms, start=1):
            began = start + timedelta(seconds=0.5)
            CompensationAttempt.objects.create(step=step, number=k, started_at=began,
                finished_at=began + timedelta(milliseconds=ms), outcome=outcome)  # fmt: skip
    return saga

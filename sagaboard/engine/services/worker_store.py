"""``WorkerStore``: the ``DjangoStore`` one worker task restores its saga through.

Two costs the approval round trip paid before an undo could start
(``benchmarks.approval``): ``attach`` read the saga and its steps again though the
task had just read them, and the lease was taken in a commit of its own (on
PostgreSQL a WAL flush) just before the first transition's commit (another one).

So the first ``load`` is served from the rows the task read (and the store knows the
saga from them: its first write reads nothing either), and, when asked to
(``lazy_lease``), the lease is taken by the first transition's own write. That is
safe only when nobody held the lease and no undo is in flight: the engine's first
side effect is then that transition (an undo starts after its COMPENSATING
write), and the write is fenced as the lease's compare-and-set is. Under the saga's
row lock it needs the lease free or ours, and the saga unchanged since it was read
(its ``seq``). A task that loses that race has written nothing, run nothing, and is
``Busy``, as it would have been at ``attach``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sagaboard.engine.services.django_store import DjangoStore, saga_record, step_snapshot
from sagaboard.models import Saga, Step
from undo_core import LeaseError, SagaChange, SagaSnapshot, StepState


class Busy(Exception):
    """Another live process holds the saga; try again in ``retry_in`` seconds."""

    def __init__(self, message: str, retry_in: float = 5.0) -> None:
        super().__init__(message)
        self.retry_in = retry_in


class WorkerStore(DjangoStore):
    """A ``DjangoStore`` for one task on one saga whose rows (steps with attempts) it has."""

    def __init__(self, saga: Saga, steps: Sequence[Step], *, lazy_lease: bool = False) -> None:
        super().__init__(saga.project, driver=saga.driver)
        self._rows: tuple[Saga, Sequence[Step]] | None = (saga, steps)
        self._saga_id = saga.saga_id
        in_flight = any(s.state == StepState.COMPENSATING for s in steps)
        self._lazy = lazy_lease and not in_flight
        self.lease_deferred = False
        """True while the lease is to be taken by the next write (nothing written yet)."""
        self._held = False

    def load(self, saga_id: str) -> SagaSnapshot | None:
        rows, self._rows = self._rows, None
        if rows is None or rows[0].saga_id != saga_id:
            return super().load(saga_id)
        saga, steps = rows
        self.remember(saga, steps)  # the first write need not read them again either
        return SagaSnapshot(saga_record(saga), tuple(step_snapshot(s) for s in steps))

    def acquire_lease(
        self, saga_id: str, owner: str, expires_at: datetime, *, expected_owner: str | None
    ) -> bool:
        if self._lazy and expected_owner is None and saga_id == self._saga_id:
            self.lease_deferred = True  # the first write claims it (every write names its owner)
            return True
        self._held = super().acquire_lease(
            saga_id, owner, expires_at, expected_owner=expected_owner
        )
        return self._held

    def apply(self, change: SagaChange) -> None:
        try:
            super().apply(change)
        except LeaseError as err:
            if self.lease_deferred:
                raise Busy(f"another worker got saga {change.saga.id!r} first: {err}") from err
            raise
        self.lease_deferred = False
        self._held = True  # the engine's every write (re)claims the lease

    def release_lease(self, saga_id: str, owner: str) -> None:
        if self._held:  # never taken (deferred, no write), or released already: nothing to do
            super().release_lease(saga_id, owner)
            self._held = False

    @property
    def lease_taken(self) -> bool:
        """False only while a deferred lease waits for the first write."""
        return not self.lease_deferred

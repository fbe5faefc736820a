"""Where sagas are kept: the :class:`SagaStore` protocol and :class:`MemoryStore`.

The engine writes through one method, :meth:`SagaStore.apply`, once per
transition and *before* it changes its own state: if the write raises, the
transition did not happen. A store must apply each change atomically (the
saga row, the step row and the event together, or none of them).
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import NamedTuple, Protocol, runtime_checkable

from ..vocabulary.errors import LeaseError
from ..vocabulary.records import SagaEvent, SagaRecord, SagaSnapshot, StepSnapshot
from ..vocabulary.states import SagaStatus

__all__ = [
    "UNFINISHED_STATUSES",
    "MemoryStore",
    "RollbackRequest",
    "RollbackRequests",
    "SagaChange",
    "SagaStore",
]

#: Statuses of sagas that a dead process may have left half done.
UNFINISHED_STATUSES = frozenset({SagaStatus.IN_PROGRESS, SagaStatus.COMPENSATING})


class SagaChange(NamedTuple):
    """One transition to persist: the saga row, the step it touched (if any), the event."""

    saga: SagaRecord
    step: StepSnapshot | None
    event: SagaEvent


@runtime_checkable
class SagaStore(Protocol):
    """Persistence for sagas. Every method may raise :class:`~undo_core.StoreError`."""

    def apply(self, change: SagaChange) -> None:
        """Persist one change atomically: upsert the saga and the step, append the event.

        Must raise (and persist nothing) if any part cannot be stored, e.g.
        :class:`~undo_core.SerializationError` naming the step.
        """
        ...

    def load(self, saga_id: str) -> SagaSnapshot | None:
        """The saga with its steps ordered by index, or ``None`` if unknown."""
        ...

    def list_unfinished(self) -> list[str]:
        """Ids of sagas IN_PROGRESS or COMPENSATING, oldest first."""
        ...

    def acquire_lease(
        self, saga_id: str, owner: str, expires_at: datetime, *, expected_owner: str | None
    ) -> bool:
        """Compare-and-set the saga's lease; ``True`` if ``owner`` now holds it.

        Succeeds only when the current owner is ``expected_owner`` (``None``: no
        owner) or is already ``owner``. Two processes racing with the same
        ``expected_owner`` never both win.
        """
        ...

    def release_lease(self, saga_id: str, owner: str) -> None:
        """Drop the lease if ``owner`` holds it."""
        ...


class RollbackRequest(NamedTuple):
    """A person's request to roll back a running saga: who asked, why, and when."""

    by: str
    reason: str
    at: datetime | None = None


@runtime_checkable
class RollbackRequests(Protocol):
    """A store that can tell the engine a person asked for a saga's rollback (optional).

    The engine asks it at every step boundary (before ``execute`` runs a tool), so
    the answer must come from memory, never from the network: ``SagaboardStore``
    keeps what sagaboard's answers said, ``MemoryStore`` what
    :meth:`MemoryStore.request_rollback` was told. On a request the engine runs the
    rollback (newest first, as after a failed step) and ``execute`` raises
    :class:`~undo_core.RollbackRequestedError`.
    """

    def rollback_requested(self, saga_id: str) -> RollbackRequest | None:
        """The pending request for ``saga_id``, or ``None`` (cheap: called once per step)."""
        ...


def _check_fence(current: SagaRecord | None, incoming: SagaRecord) -> None:
    """Refuse a write from a process that lost the saga's lease (fencing).

    A write must also carry a newer ``seq`` than the stored one: a process whose
    lease was taken over (and since released) holds a stale copy of the saga.
    """
    if current is not None and current.lease_owner not in (None, incoming.lease_owner):
        raise LeaseError(
            f"saga {incoming.id!r} is leased by {current.lease_owner!r}, "
            f"not by this process ({incoming.lease_owner!r})"
        )
    if current is not None and incoming.seq <= current.seq:
        raise LeaseError(
            f"saga {incoming.id!r} was changed by another process since this one "
            f"({incoming.lease_owner!r}) read it"
        )


class MemoryStore:
    """The default store: dictionaries in this process, guarded by a lock.

    Values are kept as the objects given (not copied, not JSON-checked), as
    agent-undo keeps them. Nothing survives the process.
    """

    def __init__(self, *, keep_events: bool = True) -> None:
        self._lock = threading.Lock()
        self._sagas: dict[str, SagaRecord] = {}
        self._steps: dict[str, dict[str, StepSnapshot]] = {}
        self._events: dict[str, list[SagaEvent]] = {}
        self._keep_events = keep_events
        self._requests: dict[str, RollbackRequest] = {}

    def apply(self, change: SagaChange) -> None:
        saga, step, event = change
        saga_id = saga.id
        with self._lock:
            current = self._sagas.get(saga_id)
            if current is None:
                self._steps[saga_id] = {}
                self._events[saga_id] = []
            elif current.lease_owner != saga.lease_owner or saga.seq <= current.seq:
                _check_fence(current, saga)
            self._sagas[saga_id] = saga
            if step is not None:
                self._steps[saga_id][step.id] = step
            if self._keep_events:
                self._events[saga_id].append(event)

    def load(self, saga_id: str) -> SagaSnapshot | None:
        with self._lock:
            record = self._sagas.get(saga_id)
            if record is None:
                return None
            steps = sorted(self._steps.get(saga_id, {}).values(), key=lambda s: s.position)
            return SagaSnapshot(record=record, steps=tuple(steps))

    def list_unfinished(self) -> list[str]:
        with self._lock:
            rows = [r for r in self._sagas.values() if r.status in UNFINISHED_STATUSES]
        return [r.id for r in sorted(rows, key=lambda r: r.created_at)]

    def acquire_lease(
        self, saga_id: str, owner: str, expires_at: datetime, *, expected_owner: str | None
    ) -> bool:
        with self._lock:
            record = self._sagas.get(saga_id)
            if record is None or record.lease_owner not in (expected_owner, owner):
                return False
            self._sagas[saga_id] = record._replace(lease_owner=owner, lease_expires_at=expires_at)
            return True

    def release_lease(self, saga_id: str, owner: str) -> None:
        with self._lock:
            record = self._sagas.get(saga_id)
            if record is not None and record.lease_owner == owner:
                self._sagas[saga_id] = record._replace(lease_owner=None, lease_expires_at=None)

    def request_rollback(
        self, saga_id: str, *, by: str, reason: str, at: datetime | None = None
    ) -> None:
        """Ask for ``saga_id``'s rollback: its next ``execute`` rolls it back instead.

        Safe from any thread (another thread may ask while the saga runs).
        """
        with self._lock:
            self._requests[saga_id] = RollbackRequest(by=by, reason=reason, at=at)

    def rollback_requested(self, saga_id: str) -> RollbackRequest | None:
        """The request made with :meth:`request_rollback`, or ``None``."""
        return self._requests.get(saga_id)

    def events(self, saga_id: str) -> list[SagaEvent]:
        """Every event of one saga, in order (when ``keep_events`` is on)."""
        with self._lock:
            return list(self._events.get(saga_id, []))

    def sagas(self) -> list[str]:
        """Every saga id, oldest first."""
        with self._lock:
            return [r.id for r in sorted(self._sagas.values(), key=lambda r: r.created_at)]

"""A saga's ledger: its record and steps, written to its store one checked change at a time.

Every change goes through :meth:`Ledger.saga_to`, :meth:`Ledger.step_to` or
:meth:`Ledger.record_attempt`: check the transition table and the rules every
store enforces (``undo_core.stores.rules``), write to the store, then change memory,
then tell listeners. A change that the store refuses did not happen, except a
change that records something the world already did (a tool ran, an undo ran):
memory moves on anyway, so the rollback still undoes it, and the store's error
comes back as a :class:`Recorded` result for the flow that made the change to
raise or report when its operation ends. It is never swallowed.

The ledger also holds the saga's lease: every write (re)claims it, renewing it
once half of it is spent, and a saga at rest lets it go so that another process
may attach at once. A lease owner names its host and process (``host:pid:nonce``),
so a process on the same host can tell when the owner has died.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..stores.rules import check_change, is_unsettled
from ..stores.storage import SagaChange, SagaStore
from ..vocabulary.clock import Clock
from ..vocabulary.errors import LeaseError, SagaNotFoundError, StepNotFoundError, StoreError
from ..vocabulary.records import (
    CompensationAttempt,
    EventKind,
    SagaEvent,
    SagaRecord,
    SagaSnapshot,
    StepSnapshot,
)
from ..vocabulary.states import (
    STEP_TRANSITIONS,
    SagaStatus,
    StepState,
    check_saga_transition,
    check_step_transition,
)
from ..vocabulary.tools import Tool
from .steps import StepRow, describe, snapshot_values

__all__ = [
    "SAVED",
    "Ledger",
    "Listener",
    "Recorded",
    "default_owner",
    "local_owner_dead",
    "owner_is_gone",
    "take_lease",
]

log = logging.getLogger("undo_core")

# The records a transition makes are built positionally with ``tuple.__new__`` (a
# keyword call costs three times as much, and a transition makes three of them). The
# field orders they rely on are pinned here, so adding a field fails at import, not
# silently at run time.
_tuple = tuple.__new__
assert SagaRecord._fields == (
    "id", "name", "status", "created_at", "updated_at", "seq", "next_step_number", "options",
    "state", "failed_step", "lease_owner", "lease_expires_at",
)  # fmt: skip
assert SagaEvent._fields == (
    "saga_id", "saga_name", "seq", "kind", "to_state", "from_state", "at", "step_id",
    "tool_name", "actor", "detail",
)  # fmt: skip
assert SagaChange._fields == ("saga", "step", "event")

Listener = Callable[[SagaEvent], None]


@dataclass(frozen=True, slots=True)
class Recorded:
    """What became of a change that records something the world already did.

    ``unsaved`` is the store's error when memory moved on without the store: the
    operation goes on (a completed step must still be undone on rollback) and the
    flow that made the change raises or reports the error when its operation ends.
    """

    unsaved: StoreError | None = None

    def then(self, later: Recorded) -> Recorded:
        """The result an operation reports after two changes: the first error, if any."""
        return self if self.unsaved is not None else later


SAVED = Recorded()
"""The result of a change the store took (one shared instance: the common case is free)."""


# ---------------------------------------------------------------- the lease


_process_name: tuple[int, str] = (-1, "")
"""(pid, ``"host:pid"``) of this process, asked of the system once (again after a fork)."""


def default_owner() -> str:
    """A lease owner id naming this host and process, so recovery can tell if it died.

    Every saga gets its own random nonce: two sagas of one process never share a lease.
    """
    global _process_name
    pid = os.getpid()
    if _process_name[0] != pid:  # a forked child names itself, not its parent
        _process_name = (pid, f"{socket.gethostname()}:{pid}")
    return f"{_process_name[1]}:{os.urandom(4).hex()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_is_gone(record: SagaRecord, now: datetime) -> bool:
    """True when nobody alive holds the saga: no lease, an expired one, or a dead local owner."""
    if record.lease_owner is None:
        return True
    if record.lease_expires_at is not None and record.lease_expires_at <= now:
        return True
    return local_owner_dead(record.lease_owner)


def local_owner_dead(owner: str) -> bool:
    """True when ``owner`` (``host:pid:...``) names a process of this host that has exited.

    Owners on other hosts, or not in that form, are never judged here: their lease
    expiry says when they are gone.
    """
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    return host == socket.gethostname() and pid.isdigit() and not _pid_alive(int(pid))


def take_lease(
    store: SagaStore, saga_id: str, owner: str, now: datetime, lease: timedelta
) -> SagaSnapshot:
    """Load a saga and take its lease for ``owner``; returns the saga as stored.

    Raises :class:`SagaNotFoundError` for an unknown id and :class:`LeaseError`
    while another live process holds it. Taking over is a compare-and-set on the
    store, so two processes never both win.
    """
    snapshot = store.load(saga_id)
    if snapshot is None:
        raise SagaNotFoundError(f"no saga {saga_id!r} in the store")
    current = snapshot.record.lease_owner
    if current != owner and not owner_is_gone(snapshot.record, now):
        raise LeaseError(f"saga {saga_id!r} is held by live process {current!r}")
    if not store.acquire_lease(saga_id, owner, now + lease, expected_owner=current):
        raise LeaseError(f"saga {saga_id!r} was taken by another process first")
    return snapshot


# ---------------------------------------------------------------- the ledger


class Ledger:
    """One saga's record and steps, and the only code that changes them."""

    def __init__(
        self,
        record: SagaRecord,
        *,
        store: SagaStore,
        clock: Clock,
        owner: str,
        lease: timedelta,
        listeners: list[Listener],
        actor: str | None,
    ) -> None:
        self.record = record
        self.store = store
        self.clock = clock
        self.owner = owner
        self.actor = actor
        self.listeners = listeners
        self._lease = lease
        self._half_lease = lease / 2
        self._held_until: datetime | None = None
        """The lease expiry this process last wrote (compared by identity)."""
        self._renew_at = datetime.min
        """When that lease is half spent and the next change renews it (set with the above)."""
        self.steps: list[StepRow] = []
        self.by_id: dict[str, StepRow] = {}
        self.started = False
        """The saga is in its store (its first change was written, or it was loaded)."""

    def load(self, snapshot: SagaSnapshot, tools: Mapping[str, Tool]) -> None:
        """Take over a stored saga: its record (with this process's lease) and its steps."""
        self.record = snapshot.record._replace(lease_owner=self.owner)
        self.started = True
        for snap in snapshot.steps:
            self._append(StepRow.restore(snap, tools.get(snap.tool_name)))

    # ------------------------------------------------------------ reads

    def get(self, step_id: str) -> StepRow:
        """One step; :class:`StepNotFoundError` if unknown."""
        try:
            return self.by_id[step_id]
        except (KeyError, TypeError):
            raise StepNotFoundError(f"saga {self.record.name!r} has no step {step_id!r}") from None

    def unsettled(self, step: StepRow) -> bool:
        """The step still needs a human (or a rollback) before the saga can rest."""
        return is_unsettled(step.state, step.has_undo, self.record.status)

    # ------------------------------------------------------------ writing

    def commit(
        self,
        record: SagaRecord,
        step: StepRow | None,
        event: SagaEvent,
        before: StepSnapshot | None = None,
    ) -> None:
        """Store one change, after the rules every store enforces (``undo_core.stores.rules``).

        ``before``: the step as it was stored (``None`` for a new step). The engine's
        own moves pass the same rules as any change a server receives, so the two
        cannot drift apart: a refusal here is a bug in the engine, and stops it.
        """
        snap = None
        if step is not None:
            snap = step.last = _tuple(StepSnapshot, snapshot_values(step))  # step.snapshot()
        change = _tuple(SagaChange, (record, snap, event))
        check_change(self.record if self.started else None, before, change, steps=self.steps)
        self.store.apply(change)
        if not self.listeners:
            return
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:  # a listener must never break the saga
                log.exception("saga listener %r failed on %s", listener, event)

    def next_record(
        self,
        *,
        status: SagaStatus | None = None,
        next_step_number: int | None = None,
        failed_step: str | None = None,
    ) -> SagaRecord:
        """The saga's record for its next change: one event later, leased by this process.

        ``status``, ``next_step_number`` and ``failed_step`` replace the current ones when given.
        """
        now = self.clock.now()
        r = self.record
        expires = r.lease_expires_at
        held = expires is not None and expires is self._held_until and r.lease_owner == self.owner
        if not held or now >= self._renew_at:
            if expires is None or r.lease_owner != self.owner or expires < now + self._half_lease:
                expires = now + self._lease  # renew once half the lease is spent
            # Remembered, so the next changes compare one time instead of adding two.
            self._held_until, self._renew_at = expires, expires - self._half_lease
        return _tuple(
            SagaRecord,
            (
                r.id,
                r.name,
                r.status if status is None else status,
                r.created_at,
                now,
                r.seq + 1,
                r.next_step_number if next_step_number is None else next_step_number,
                r.options,
                r.state,
                r.failed_step if failed_step is None else failed_step,
                # Every write (re)claims the lease: fencing refuses a stale owner.
                self.owner,
                expires,
            ),
        )

    def event(
        self,
        record: SagaRecord,
        kind: EventKind,
        to_state: str,
        from_state: str | None,
        step: StepRow | None = None,
        *,
        actor: str | None = None,
        detail: str | None = None,
    ) -> SagaEvent:
        """The event that tells listeners and stores about one change."""
        return _tuple(
            SagaEvent,
            (
                record.id,
                record.name,
                record.seq,
                kind,
                to_state,
                from_state,
                record.updated_at,
                None if step is None else step.id,
                None if step is None else step.tool_name,
                actor or self.actor,
                detail,
            ),
        )

    def start(self) -> None:
        """Write the saga to its store now, if it is not there yet."""
        if self.started:
            return
        # A step that failed before the saga was ever stored (its PENDING write failed) is
        # noted on the record; a new saga has no failed step, so the first write leaves it
        # to the next change (the rollback's COMPENSATING), as note_failed_step says.
        failed_step = self.record.failed_step
        record = self.next_record()._replace(failed_step=None)
        self.commit(record, None, self.event(record, EventKind.SAGA, record.status, None))
        self.record = record._replace(failed_step=failed_step)
        self.started = True

    def saga_to(
        self, status: SagaStatus, *, actor: str | None = None, failed_step: str | None = None
    ) -> None:
        """Move the saga (naming the step that failed it, if any); at rest, it lets its lease go."""
        check_saga_transition(self.record.status, status, saga_id=self.record.id)
        record = self.next_record(status=status, failed_step=failed_step)
        event = self.event(record, EventKind.SAGA, status, self.record.status, actor=actor)
        self.commit(record, None, event)
        self.record = record
        if status.ended:
            # A resting saga needs no owner: let another process (a dashboard,
            # an operator's tool) attach to it at once to retry or resolve.
            try:
                self.store.release_lease(record.id, self.owner)
                self.record = record._replace(lease_owner=None, lease_expires_at=None)
            except StoreError:
                log.warning("could not release the lease of saga %s", record.id, exc_info=True)

    def step_to(
        self,
        step: StepRow,
        state: StepState,
        *,
        actor: str | None = None,
        happened: bool = False,
        detail: str | None = None,
        **fields: Any,
    ) -> Recorded:
        """Move one step; ``happened=True`` when the world already changed (see module doc).

        A refused change raises, and memory stays as it was, unless it happened (or
        the step can no longer be stored): then memory moves on and the result
        carries the store's error.
        """
        if state not in STEP_TRANSITIONS[step.state]:
            check_step_transition(step.state, state, step_id=step.id)
        previous = {name: getattr(step, name) for name in fields} if fields else None
        before, before_completed = step.state, step.completed_at
        stored = step.last if step.last is not None else step.snapshot()
        record = self.next_record()
        now = record.updated_at
        step.state, step.updated_at = state, now
        if state is StepState.COMPLETED:
            step.completed_at = now
        for name, value in fields.items():
            setattr(step, name, value)
        event = self.event(record, EventKind.STEP, state, before, step, actor=actor, detail=detail)
        try:
            self.commit(record, step, event, stored)
        except StoreError as err:
            if not (happened or step.unpersisted):
                step.state, step.completed_at = before, before_completed
                for name, value in (previous or {}).items():
                    setattr(step, name, value)
                step.last = stored
                raise
            # The world changed (or this step can no longer be stored, e.g. its
            # output is not JSON): keep going in memory so the rollback still
            # undoes it, and hand the store error to the operation.
            step.unpersisted = True
            self.record = record
            return Recorded(unsaved=err)
        self.record = record
        return SAVED

    def record_attempt(self, step: StepRow, attempt: CompensationAttempt) -> Recorded:
        """Record a failed undo attempt that will be retried (the step stays COMPENSATING)."""
        stored = step.last if step.last is not None else step.snapshot()
        step.compensation_attempts = (*step.compensation_attempts, attempt)
        record = self.next_record()
        event = self.event(
            record,
            EventKind.ATTEMPT,
            step.state,
            step.state,
            step,
            actor=attempt.actor,
            detail=attempt.error,
        )
        try:
            self.commit(record, step, event, stored)
        except StoreError as err:
            self.record = record
            return Recorded(unsaved=err)
        self.record = record
        return SAVED

    def add_step(
        self,
        tool: Tool,
        input: Any,
        *,
        step_id: str | None = None,
        requires_approval: bool | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> StepRow:
        """Create a step and persist it as PENDING before anything runs."""
        number = self.record.next_step_number
        sid = step_id or f"step-{number}"
        if sid in self.by_id:
            raise ValueError(f"saga {self.record.name!r} already has a step {sid!r}")
        self.start()
        record = self.next_record(next_step_number=number + 1)
        step = self._row(tool, input, sid, StepState.PENDING, record.updated_at)
        if requires_approval is not None:
            step.requires_approval = bool(requires_approval)
        step.metadata = dict(metadata) if metadata else {}
        self.commit(record, step, self.event(record, EventKind.STEP, step.state, None, step))
        self.record = record
        self._append(step)
        return step

    def add_unsaved_failed_step(
        self, tool: Tool, input: Any, error: StoreError, step_id: str | None
    ) -> StepRow:
        """A step whose PENDING write failed: FAILED in memory only (its tool never ran)."""
        number = self.record.next_step_number
        self.record = self.record._replace(next_step_number=number + 1)
        step = self._row(
            tool, input, step_id or f"step-{number}", StepState.FAILED, self.clock.now()
        )
        step.error, step.error_type, step.traceback = describe(error)
        self._append(step)
        return step

    def note_failed_step(self, step_id: str) -> None:
        """Remember which step failed the saga; written with the saga's next change."""
        self.record = self.record._replace(failed_step=step_id)

    def mark(self, *, options: Mapping[str, Any], state: Any) -> None:
        """Set the saga's options and shared state; written with its next change."""
        self.record = self.record._replace(options=options, state=state)

    def release(self) -> None:
        """Let go of the lease (best effort: an expired lease frees the saga anyway)."""
        try:
            self.store.release_lease(self.record.id, self.owner)
        except Exception:
            log.warning("could not release the lease of saga %s", self.record.id, exc_info=True)

    def abandon(self) -> None:
        """An error escaped mid-flow (a crash, Ctrl-C, a store outage): free the saga.

        Its flow is gone, so nobody in this process will finish it; releasing the
        lease lets ``recover()`` or ``resume()`` take it over at once.
        """
        if not self.record.status.ended:  # an ended saga let its lease go when it came to rest
            self.release()

    # ------------------------------------------------------------ helpers

    def _append(self, step: StepRow) -> None:
        self.steps.append(step)
        self.by_id[step.id] = step

    def _row(
        self, tool: Tool, input: Any, step_id: str, state: StepState, now: datetime
    ) -> StepRow:
        return StepRow(
            id=step_id,
            position=len(self.steps),
            tool_name=tool.name,
            tool=tool,
            input=input,
            state=state,
            created_at=now,
            updated_at=now,
            has_undo=tool.has_undo,
            requires_approval=tool.requires_approval,
            reversibility=tool.reversibility.value,
            idempotency_key=f"{self.record.id}:{step_id}",
        )

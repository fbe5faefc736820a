"""``DjangoStore``: undo_core's ``SagaStore`` on the ORM, scoped to one project.

A saga run inside the server (by a Celery worker) persists through this
store with undo_core's own state machine; the ingestion API writes mirrored
transitions through the same ``apply_change``. Every change is one
transaction: the saga row (locked), the step row, new attempts, one event.

What people must hear of inside that transaction (an undo failed, a rollback ended with
something left) goes to the notifications' outbox by a direct call, in the same
transaction: notify sits below the engine, so no signal is needed (ingestion calls the
same two functions for mirrored sagas).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from sagaboard.engine.reads import rollback_outcomes
from sagaboard.engine.services.record_columns import (
    SAGA_RENAMED,
    STEP_OWN_ROWS,
    STEP_RENAMED,
    columns,
    record_from,
)
from sagaboard.models import CompensationAttempt, Event, Project, Saga, Step
from sagaboard.models.sagas import elapsed_ms
from sagaboard.notify.services import notifications
from undo_core import CompensationAttempt as AttemptRecord
from undo_core import (
    LeaseError,
    RollbackAssessment,
    RollbackRequest,
    SagaChange,
    SagaEvent,
    SagaRecord,
    SagaSnapshot,
    SagaStatus,
    StepFacts,
    StepSnapshot,
    StepState,
    StoreError,
    assess_rollback,
)
from undo_core.remote import change_to_event

UNFINISHED = [SagaStatus.IN_PROGRESS.value, SagaStatus.COMPENSATING.value]


@dataclass
class Known:
    """One saga as this store last wrote (or read) it: what its next write need not read.

    ``saga`` and ``steps`` are the rows with the columns the store keeps (every record
    field, the outcome, and what an outcome is assessed from); ``attempts``, the attempt
    numbers stored per step. A write trusts them only while the saga row is still as
    they say: the write's UPDATE is guarded by it (``Known.unchanged``).
    """

    saga: Saga
    steps: dict[str, Step] = field(default_factory=dict)
    attempts: dict[str, set[int]] = field(default_factory=dict)

    def unchanged(self, record: SagaRecord, *, check_lease: bool, rolling: bool) -> Q:
        """The saga row as this store knows it, and writable by ``record``'s owner.

        Every write to a saga moves its ``seq`` and ``changed_at``, so the pair says nobody
        wrote since (nor was ours undone); the lease clause is ``fence``'s. A rolling
        saga's outcome is assessed from the known steps, so it also needs no step left
        failed by an operator since (``left_at``: set once, by a write that moves neither).
        """
        saga = self.saga
        guard = Q(pk=saga.pk, seq=saga.seq, changed_at=saga.changed_at)
        if saga.rollback_requested_at is None:
            # An operator's stop moves neither: a row asked to stop since is read again,
            # so the engine hears it at its next step boundary (``rollback_requested``).
            guard &= Q(rollback_requested_at__isnull=True)
        if check_lease:
            guard &= Q(lease_owner__isnull=True) | Q(lease_owner=record.lease_owner)
        if rolling:
            left = [s.pk for s in self.steps.values() if s.left_at is not None]
            newly_left = Step.objects.filter(saga_id=OuterRef("pk"), left_at__isnull=False)
            guard &= ~Exists(newly_left.exclude(pk__in=left) if left else newly_left)
        return guard

    def facts(self) -> dict[str, StepFacts]:
        """The known steps as undo_core assesses them, in position order."""
        rows = sorted(self.steps.values(), key=lambda s: s.position)
        return {s.step_id: rollback_outcomes.facts(s) for s in rows}


class DjangoStore:
    """A :class:`undo_core.SagaStore` for one project's sagas.

    A transition is one transaction of at most three statements when the store knows
    the saga (it wrote or loaded it, and nobody changed it since): the saga row's
    guarded UPDATE (which takes its lock), the step row's UPDATE or INSERT, the event's
    INSERT; and an INSERT of the step's new attempts, if it has any. Otherwise the saga
    row is read under lock, with its steps, first (and the write is fenced as before).
    """

    def __init__(
        self,
        project: Project,
        *,
        driver: str = Saga.Driver.SERVER,  # type: ignore[assignment]
    ) -> None:
        self.project = project
        self.driver = driver
        self.new_step_undo: dict[str, Any] | None = None
        """How the undo of the next step this store creates runs (``Step.undo``): set by
        the manual-flow API before ``add_step``, so the step is stored with it at once
        and its creation event records it (a replay finds it there)."""
        self._known: dict[str, Known] = {}

    # ------------------------------------------------------------ writes

    def apply(self, change: SagaChange) -> None:
        try:
            self.apply_change(change)
        except DatabaseError as err:
            raise StoreError(f"database write failed for saga {change.saga.id!r}: {err}") from err

    def apply_change(
        self,
        change: SagaChange,
        *,
        client_event_id: str | None = None,
        digest: str = "",
        check_lease: bool = True,
    ) -> Event:
        """Persist one transition; returns the event log row.

        ``check_lease=False`` is for mirrored sagas, whose leases live in the agent;
        the sequence number is checked either way, so a stale writer never wins.
        The server's clock, not the record's, stamps ``received_at`` / ``changed_at``
        and the event's ``recorded_at`` (one reading for all three), read once the
        saga's row is locked, so the writers of one saga get rising times (a guarded
        UPDATE that finds the row as known had no writer in between: the next one
        waits for this one's lock, and reads its clock after).
        """
        record, step, event = change
        known = self._known.pop(record.id, None)  # kept again only if this write succeeds
        with transaction.atomic():
            now = timezone.now()
            found = None if known is None else _saga_write_known(known, change, now, check_lease)
            if known is None or found is None:
                known = self._saga_locked(record.id)
                now = timezone.now()  # under the lock
                if known.saga.pk is not None:
                    fence(known.saga, record, check_lease=check_lease)
                found = _saga_write(known, change, now)
            saga, created, row = known.saga, None, None
            if step is not None:
                row, created = _step_write(known, step, now, undo=self.new_step_undo)
                if event.to_state == StepState.ROLLBACK_FAILED and event.step_id == step.id:
                    notifications.notify_rollback_failed(saga, row)
            if event.step_id is None and event.to_state == SagaStatus.ROLLED_BACK:
                notifications.notify_rolled_back(saga, found)
            fields = event_fields(saga, event, client_event_id, digest)
            logged = Event.objects.create(
                **fields, recorded_at=now, change=change_json(change, created)
            )
        if not record.status.ended:  # a saga at rest is written again rarely: let it go
            self._known[record.id] = known
        return logged

    def _saga_locked(self, saga_id: str) -> Known:
        """The saga row, locked, and its steps; a new row (not saved) if there is none."""
        saga = (
            Saga.objects.select_for_update().filter(project=self.project, saga_id=saga_id).first()
        )
        if saga is None:
            return Known(Saga(project=self.project, saga_id=saga_id, driver=self.driver))
        saga.project = self.project
        steps = Step.objects.filter(saga=saga).only(*KNOWN_STEP_COLUMNS)
        return Known(saga, {s.step_id: s for s in steps})

    def remember(self, saga: Saga, steps: Iterable[Step]) -> None:
        """Know this saga as read: ``steps`` all of its steps, their attempts prefetched.

        Read without a lock: a write that finds the row changed since reads it again.
        The rows are copied, so the caller's own copies do not move with the writes.
        """
        mine = copy.copy(saga)
        mine.project = self.project
        read = list(steps)
        rows = {s.step_id: copy.copy(s) for s in read}
        attempts = {s.step_id: {a.number for a in s.attempts.all()} for s in read}
        self._known[saga.saga_id] = Known(mine, rows, attempts)

    def rollback_requested(self, saga_id: str) -> RollbackRequest | None:
        """An operator's stop of a saga this process runs, as its last write found the row.

        Asked by the engine at every step boundary: read from what the store knows (no
        query), so a stop is heard at the boundary after the next write (a write of a
        saga asked to stop since reads the row again: ``Known.unchanged``), as an SDK
        agent hears it in the answer to its next events. Only an engine that runs its own
        forward steps asks: a worker's never does.
        """
        known = self._known.get(saga_id)
        saga = known.saga if known is not None else None
        if saga is None or saga.rollback_requested_at is None:
            return None
        if saga.rollback_request_done_at is not None or saga.status != SagaStatus.IN_PROGRESS:
            return None
        by = saga.rollback_requested_by
        if saga.rollback_request_heard_at is None:
            saga.rollback_request_heard_at = timezone.now()
            Saga.objects.filter(pk=saga.pk, rollback_request_heard_at__isnull=True).update(
                rollback_request_heard_at=saga.rollback_request_heard_at
            )
        return RollbackRequest(
            by=(by.get_username() if by is not None else "an operator"),
            reason=saga.rollback_request_reason or "",
            at=saga.rollback_requested_at,
        )

    # ------------------------------------------------------------ leases

    def acquire_lease(
        self, saga_id: str, owner: str, expires_at: datetime, *, expected_owner: str | None
    ) -> bool:
        current = Q(lease_owner=owner) | (
            Q(lease_owner__isnull=True) if expected_owner is None else Q(lease_owner=expected_owner)
        )
        updated = Saga.objects.filter(Q(project=self.project, saga_id=saga_id) & current).update(
            lease_owner=owner, lease_expires_at=expires_at
        )
        return updated == 1

    def release_lease(self, saga_id: str, owner: str) -> None:
        Saga.objects.filter(project=self.project, saga_id=saga_id, lease_owner=owner).update(
            lease_owner=None, lease_expires_at=None
        )

    # ------------------------------------------------------------ reads

    def load(self, saga_id: str) -> SagaSnapshot | None:
        saga = (
            Saga.objects.filter(project=self.project, saga_id=saga_id)
            .prefetch_related("steps__attempts")
            .first()
        )
        if saga is None:
            return None
        self.remember(saga, saga.steps.all())
        return saga_snapshot(saga)

    def events(self, saga_id: str) -> list[dict[str, object]]:
        """The saga's event log, in order (for inspection and tests)."""
        return list(
            Event.objects.filter(project=self.project, saga__saga_id=saga_id, seq__isnull=False)
            .order_by("seq")
            .values("seq", "kind", "step_id", "from_state", "to_state", "at", "actor", "detail")
        )

    def list_unfinished(self) -> list[str]:
        return list(
            Saga.objects.filter(project=self.project, status__in=UNFINISHED)
            .order_by("received_at", "pk")
            .values_list("saga_id", flat=True)
        )


KNOWN_STEP_COLUMNS = (
    "id", "saga_id", "step_id", "position", "undo", "state", "tool_name", "has_undo",
    "left_at", "decision_note", "left_reason",
)  # fmt: skip
"""What a write reads of a saga's steps when it does not know them: how to write each
again (``undo``) and what its outcome is assessed from (``rollback_outcomes.facts``)."""


def _saga_values(
    known: Known, record: SagaRecord, step: StepSnapshot | None, now: datetime
) -> tuple[dict[str, Any], RollbackAssessment]:
    """The saga row's columns after this change, and its rollback as they assess it.

    The steps are the known ones with the changed one as it is about to be (read only
    while the saga rolls back: a forward step's outcome is none).
    """
    saga = known.saga
    values = columns(record, skip=("id",))
    values["created_at"] = saga.created_at or record.created_at  # the first report stands
    values["changed_at"] = now
    values["duration_ms"] = elapsed_ms(saga.received_at, now)
    facts: dict[str, StepFacts] = {}
    if record.status in rollback_outcomes.ROLLING:
        facts = known.facts()
        if step is not None:
            stored = facts.get(step.id)
            facts[step.id] = StepFacts.of(step, left=bool(stored and stored.left))
    found = assess_rollback(record.status, facts.values())
    values.update(rollback_outcomes.fields(found))
    return values, found


def _saga_write_known(
    known: Known, change: SagaChange, now: datetime, check_lease: bool
) -> RollbackAssessment | None:
    """Write the saga row if it is as ``known`` says, in one guarded UPDATE; None if not.

    A stale change (``seq``) is left to the locked path, whose ``fence`` says why.
    """
    record = change.saga
    if record.seq <= known.saga.seq:
        return None
    values, found = _saga_values(known, record, change.step, now)
    rolling = record.status in rollback_outcomes.ROLLING
    guard = known.unchanged(record, check_lease=check_lease, rolling=rolling)
    if Saga.objects.filter(guard).update(**values) != 1:
        return None
    for column, value in values.items():
        setattr(known.saga, column, value)
    return found


def _saga_write(known: Known, change: SagaChange, now: datetime) -> RollbackAssessment:
    """Write the saga row read under lock (INSERT if new, else UPDATE of its columns)."""
    saga = known.saga
    if saga.pk is None:
        saga.received_at = now
    values, found = _saga_values(known, change.saga, change.step, now)
    for column, value in values.items():
        setattr(saga, column, value)
    if saga.pk is None:
        saga.save(force_insert=True)
    else:
        Saga.objects.filter(pk=saga.pk).update(**values)
    return found


def _step_write(
    known: Known, s: StepSnapshot, now: datetime, *, undo: dict[str, Any] | None
) -> tuple[Step, dict[str, Any] | None]:
    """Write the step row and its new attempts; returns the row and, if this change
    created it, how its undo runs (``Step.undo``, for the creation event)."""
    row = known.steps.get(s.id)
    values = columns(s, skip=("id", *STEP_OWN_ROWS))
    values["changed_at"] = now
    created = None
    if row is None:
        row = Step(saga=known.saga, step_id=s.id, changed_at=now)
        copy_step(row, s, driver=known.saga.driver, undo=undo)
        row.save(force_insert=True)
        known.steps[s.id] = row
        known.attempts[s.id] = set()
        created = row.undo
    else:
        if not row.undo and known.saga.driver == Saga.Driver.CLIENT:
            # Set when the step is created, never changed (no event carries it). A server
            # row stored as {} before the agent's undos were told apart stays as its
            # creation event says: ``undo_kinds.undo_runner`` reads it the safe way.
            values["undo"] = _default_undo(known.saga.driver, s.has_undo)
        Step.objects.filter(pk=row.pk).update(**values)
        for column, value in values.items():
            setattr(row, column, value)
    if s.compensation_attempts:  # most transitions carry none: no query
        stored = known.attempts.get(s.id)
        if stored is None:  # read under lock: attempts unknown yet
            stored = known.attempts[s.id] = set(row.attempts.values_list("number", flat=True))
        new = new_attempts(row.pk, s, stored)
        if new:
            CompensationAttempt.objects.bulk_create(new)
            stored.update(a.number for a in new)
    return row, created


def fence(saga: Saga, record: SagaRecord, *, check_lease: bool) -> None:
    """Refuse a write from a process that lost the lease, or that carries a stale seq."""
    if check_lease and saga.lease_owner not in (None, record.lease_owner):
        raise LeaseError(f"saga {record.id!r} is leased by {saga.lease_owner!r}")
    if record.seq <= saga.seq:
        raise LeaseError(f"saga {record.id!r} is at event {saga.seq}; event {record.seq} is stale")


def copy_saga(saga: Saga | SimpleNamespace, r: SagaRecord) -> None:
    first_seen = saga.created_at
    for column, value in columns(r, skip=("id",)).items():
        setattr(saga, column, value)
    saga.created_at = first_seen or r.created_at


def change_json(change: SagaChange, undo: dict[str, Any] | None = None) -> str:
    """The change as the event log keeps it (``Event.change``): the transition event of
    docs/api.md, marked as written by sagaboard's own engine (``"store"``: a replay reads
    it as the engine wrote it, not as agent input), plus, for a step this change created,
    how its undo runs."""
    data = change_to_event(change)
    data["store"] = "sagaboard"
    if undo is not None:
        data["undo"] = undo
    return json.dumps(data, ensure_ascii=False, allow_nan=False, sort_keys=True)


def copy_step(
    row: Step | SimpleNamespace,
    s: StepSnapshot,
    *,
    driver: str,
    undo: dict[str, Any] | None = None,
) -> None:
    for column, value in columns(s, skip=("id", *STEP_OWN_ROWS)).items():
        setattr(row, column, value)
    if not row.undo:  # set when the step is created, never changed (no event carries it)
        row.undo = undo if undo is not None else _default_undo(driver, s.has_undo)


def _default_undo(driver: str, has_undo: bool) -> dict[str, Any]:
    """A step's ``undo`` when nobody said how it runs: the agent's.

    A mirrored saga's undos all run in its agent; an engine running in its own process
    over this store (the demo's loader, an app's own code) holds its tools' undos there
    too, so those are ``client`` as well, never ``none`` (which says there is nothing to
    undo): ``undo_kinds.undo_runner`` tells the three cases apart.
    """
    if driver == Saga.Driver.CLIENT or has_undo:
        return {"kind": "client"}
    return {"kind": "none"}


def new_attempts(step_pk: int, s: StepSnapshot, known: set[int]) -> list[CompensationAttempt]:
    """The snapshot's attempts not stored yet (attempts are append-only)."""
    return [
        CompensationAttempt(step_id=step_pk, **columns(a))
        for a in s.compensation_attempts
        if a.number not in known
    ]


def event_fields(
    saga: Saga | SimpleNamespace, e: SagaEvent, client_event_id: str | None, digest: str
) -> dict[str, Any]:
    return {
        "project_id": saga.project_id,
        "saga": saga,
        "seq": e.seq,
        "client_event_id": client_event_id or f"{saga.saga_id}:{e.seq}",
        "digest": digest,
        "kind": e.kind.value,
        "step_id": e.step_id,
        "tool_name": e.tool_name,
        "from_state": e.from_state,
        "to_state": e.to_state,
        "at": e.at,
        "actor": e.actor,
        "detail": e.detail,
    }


def saga_record(saga: Saga) -> SagaRecord:
    record: SagaRecord = record_from(SagaRecord, saga, SAGA_RENAMED)
    return record


def step_snapshot(step: Step) -> StepSnapshot:
    attempts = tuple(record_from(AttemptRecord, a) for a in step.attempts.all())
    snapshot: StepSnapshot = record_from(
        StepSnapshot, step, STEP_RENAMED, compensation_attempts=attempts
    )
    return snapshot


def saga_snapshot(saga: Saga) -> SagaSnapshot:
    return SagaSnapshot(saga_record(saga), tuple(step_snapshot(s) for s in saga.steps.all()))

"""``DjangoStore``: undo_core's ``SagaStore`` on the ORM, scoped to one project.

A saga run inside the server (by a Celery worker) persists through this
store with undo_core's own state machine; the ingestion API writes mirrored
transitions through the same ``apply_change``. Every change is one
transaction: the saga row (locked), the step row, new attempts, one event.

What others must hear of inside that transaction (an undo failed, a rollback ended
with something left) goes out as a signal: the store knows no receivers
(``sagaboard.apps`` connects the notifications' outbox to them).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Q
from django.dispatch import Signal
from django.utils import timezone

from sagaboard.domain.record_columns import (
    SAGA_RENAMED,
    STEP_OWN_ROWS,
    STEP_RENAMED,
    columns,
    record_from,
)
from sagaboard.models import CompensationAttempt, Event, Project, Saga, Step
from sagaboard.models.sagas import elapsed_ms
from sagaboard.selectors import rollback_outcomes
from undo_core import CompensationAttempt as AttemptRecord
from undo_core import (
    LeaseError,
    RollbackAssessment,
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

undo_failed = Signal()
"""Sent (``saga=``, ``step=``: the rows) when a step's undo has just failed (ROLLBACK_FAILED)."""
rollback_ended = Signal()
"""Sent (``saga=``, ``found=``: the ``RollbackAssessment``) when a rollback has just ended."""

UNFINISHED = [SagaStatus.IN_PROGRESS.value, SagaStatus.COMPENSATING.value]


class DjangoStore:
    """A :class:`undo_core.SagaStore` for one project's sagas."""

    def __init__(self, project: Project, *, driver: str = Saga.Driver.SERVER) -> None:
        self.project = project
        self.driver = driver
        self.new_step_undo: dict[str, Any] | None = None
        """How the undo of the next step this store creates runs (``Step.undo``): set by
        the manual-flow API before ``add_step``, so the step is stored with it at once
        and its creation event records it (a replay finds it there)."""

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
        and the event's ``recorded_at`` (one reading for all three).
        """
        record, step, event = change
        with transaction.atomic():
            saga = (
                Saga.objects.select_for_update()
                .filter(project=self.project, saga_id=record.id)
                .first()
            )
            now = timezone.now()  # read under the lock: writers of one saga get rising times
            if saga is None:
                saga = Saga(project=self.project, saga_id=record.id, driver=self.driver)
                saga.received_at = now
            else:
                fence(saga, record, check_lease=check_lease)
            copy_saga(saga, record)
            saga.changed_at = now
            saga.duration_ms = elapsed_ms(saga.received_at, now)
            found = _outcome(saga, step)
            saga.save()
            created = None
            if step is not None:
                row = Step.objects.filter(saga=saga, step_id=step.id).first() or Step(
                    saga=saga, step_id=step.id
                )
                if row.pk is None:
                    copy_step(row, step, driver=saga.driver, undo=self.new_step_undo)
                    created = row.undo
                else:
                    copy_step(row, step, driver=saga.driver)
                row.changed_at = now
                row.save()
                if step.compensation_attempts:  # most transitions carry none: no query
                    known = set(row.attempts.values_list("number", flat=True))
                    CompensationAttempt.objects.bulk_create(new_attempts(row.pk, step, known))
                if event.to_state == StepState.ROLLBACK_FAILED and event.step_id == step.id:
                    undo_failed.send(DjangoStore, saga=saga, step=row)
            if event.step_id is None and event.to_state == SagaStatus.ROLLED_BACK:
                rollback_ended.send(DjangoStore, saga=saga, found=found)
            fields = event_fields(saga, event, client_event_id, digest)
            return Event.objects.create(
                **fields, recorded_at=now, change=change_json(change, created)
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
        return None if saga is None else saga_snapshot(saga)

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


def _outcome(saga: Saga, step: StepSnapshot | None) -> RollbackAssessment:
    """Set the saga row's outcome columns for this change, before the row is saved.

    The stored steps with the changed one as it is about to be: one query, and only
    while the saga rolls back (a forward step costs nothing).
    """
    steps: dict[str, StepFacts] = {}
    if saga.status in rollback_outcomes.ROLLING and saga.pk is not None:
        steps = rollback_outcomes.stored_facts([saga.pk])[saga.pk]
    if step is not None and saga.status in rollback_outcomes.ROLLING:
        known = steps.get(step.id)
        steps[step.id] = StepFacts.of(step, left=bool(known and known.left))
    found = assess_rollback(SagaStatus(saga.status), steps.values())
    for name, value in rollback_outcomes.fields(found).items():
        setattr(saga, name, value)
    return found


def fence(saga: Saga, record: SagaRecord, *, check_lease: bool) -> None:
    """Refuse a write from a process that lost the lease, or that carries a stale seq."""
    if check_lease and saga.lease_owner not in (None, record.lease_owner):
        raise LeaseError(f"saga {record.id!r} is leased by {saga.lease_owner!r}")
    if record.seq <= saga.seq:
        raise LeaseError(f"saga {record.id!r} is at event {saga.seq}; event {record.seq} is stale")


def copy_saga(saga: Saga, r: SagaRecord) -> None:
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
    row: Step, s: StepSnapshot, *, driver: str, undo: dict[str, Any] | None = None
) -> None:
    for column, value in columns(s, skip=("id", *STEP_OWN_ROWS)).items():
        setattr(row, column, value)
    if not row.undo:  # set when the step is created, never changed (no event carries it)
        if undo is not None:
            row.undo = undo
        else:
            row.undo = {"kind": "client"} if driver == Saga.Driver.CLIENT else {}


def new_attempts(step_pk: int, s: StepSnapshot, known: set[int]) -> list[CompensationAttempt]:
    """The snapshot's attempts not stored yet (attempts are append-only)."""
    return [
        CompensationAttempt(step_id=step_pk, **columns(a))
        for a in s.compensation_attempts
        if a.number not in known
    ]


def event_fields(
    saga: Saga, e: SagaEvent, client_event_id: str | None, digest: str
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

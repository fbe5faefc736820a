"""Ingestion of transition events from agents (the SDK's SagaboardStore).

One call is one transaction: every event applies, or none does and the error
names the first bad one. An event repeated with its ``event_id`` (an SDK retry)
is answered as a duplicate; each move is checked against undo_core's own
transition tables before it is stored.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from django.db import transaction

from sagaboard.models import Event, Project, Saga, Step
from sagaboard.schemas import TransitionIn
from sagaboard.storage import DjangoStore
from undo_core import (
    AttemptOutcome,
    CompensationAttempt,
    EventKind,
    LeaseError,
    SagaChange,
    SagaEvent,
    SagaRecord,
    SagaStatus,
    StepSnapshot,
    StepState,
    TransitionError,
)
from undo_core.states import check_saga_transition, check_step_transition


class IngestError(Exception):
    """An event the server refuses; ``status`` and ``code`` become the HTTP answer."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field
        self.index: int | None = None
        self.event_id: str | None = None


@dataclass(frozen=True)
class IngestResult:
    event_id: str
    status: Literal["applied", "duplicate"]
    log_id: int


def events_ingest(*, project: Project, events: list[TransitionIn]) -> list[IngestResult]:
    """Apply a batch of transition events atomically, in order."""
    store = DjangoStore(project, driver=Saga.Driver.CLIENT)
    results = []
    with transaction.atomic():
        for index, event in enumerate(events):
            try:
                results.append(_ingest_one(store, event))
            except IngestError as err:
                err.index, err.event_id = index, event.event_id
                raise
    return results


def _digest(event: TransitionIn) -> str:
    canonical = json.dumps(event.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _ingest_one(store: DjangoStore, event: TransitionIn) -> IngestResult:
    digest = _digest(event)
    seen = Event.objects.filter(project=store.project, client_event_id=event.event_id).first()
    if seen is not None:
        if seen.digest != digest:
            raise IngestError(
                409,
                "conflict",
                f"event_id {event.event_id!r} was already used for a different event",
                "event_id",
            )
        return IngestResult(event.event_id, "duplicate", seen.pk)
    _check_move(store.project, event)
    try:
        row = store.apply_change(
            _change(event), client_event_id=event.event_id, digest=digest, check_lease=False
        )
    except LeaseError as err:
        raise IngestError(409, "stale_event", str(err), "event.seq") from err
    return IngestResult(event.event_id, "applied", row.pk)


def _check_move(project: Project, event: TransitionIn) -> None:
    """Refuse what undo_core's state machine forbids, naming the rule."""
    info, saga_in, step_in = event.event, event.saga, event.step
    if info.seq != saga_in.seq:
        raise IngestError(422, "validation_error", "event.seq must equal saga.seq", "event.seq")
    saga = Saga.objects.filter(project=project, saga_id=saga_in.id).first()
    if saga is None and not (info.kind is EventKind.SAGA and info.from_state is None):
        raise IngestError(
            422,
            "unknown_saga",
            f"saga {saga_in.id!r} is unknown: its first event must create it",
            "saga.id",
        )
    if saga is not None and info.seq <= saga.seq:
        raise IngestError(
            409,
            "stale_event",
            f"saga {saga_in.id!r} is at event {saga.seq}; event {info.seq} is older",
            "event.seq",
        )
    try:
        if info.kind is EventKind.SAGA:
            _check_saga_move(saga, saga_in.status, info.from_state, info.to_state)
        elif info.kind is EventKind.STEP:
            _check_step_move(saga, step_in, info.from_state, info.to_state)
        elif step_in is None and info.kind is EventKind.ATTEMPT:
            raise IngestError(422, "validation_error", "an attempt event needs its step", "step")
    except TransitionError as err:
        raise IngestError(409, "illegal_transition", str(err), "event.to_state") from err


def _check_saga_move(saga: Saga | None, status: SagaStatus, frm: str | None, to: str) -> None:
    if to != status:
        raise IngestError(
            422, "validation_error", "event.to_state must equal saga.status", "event.to_state"
        )
    if saga is None:
        if status is not SagaStatus.IN_PROGRESS:
            raise IngestError(
                409, "illegal_transition", "a new saga starts IN_PROGRESS", "saga.status"
            )
        return
    if frm is None:
        raise IngestError(409, "conflict", f"saga {saga.saga_id!r} already exists", "saga.id")
    if frm != saga.status:
        raise IngestError(
            409,
            "illegal_transition",
            f"saga {saga.saga_id!r} is {saga.status}, not {frm}",
            "event.from_state",
        )
    check_saga_transition(SagaStatus(saga.status), SagaStatus(to), saga_id=saga.saga_id)


def _check_step_move(saga: Saga | None, step: Any, frm: str | None, to: str) -> None:
    if step is None:
        raise IngestError(422, "validation_error", "a step event needs its step", "step")
    if to != step.state:
        raise IngestError(
            422, "validation_error", "event.to_state must equal step.state", "event.to_state"
        )
    stored = Step.objects.filter(saga=saga, step_id=step.id).first() if saga else None
    if frm is None:
        if stored is not None:
            raise IngestError(409, "conflict", f"step {step.id!r} already exists", "step.id")
        if step.state is not StepState.PENDING:
            raise IngestError(409, "illegal_transition", "a new step starts PENDING", "step.state")
        return
    if stored is None:
        raise IngestError(422, "unknown_step", f"step {step.id!r} is unknown", "step.id")
    if frm != stored.state:
        raise IngestError(
            409,
            "illegal_transition",
            f"step {step.id!r} is {stored.state}, not {frm}",
            "event.from_state",
        )
    check_step_transition(StepState(stored.state), StepState(to), step_id=step.id)


def _change(event: TransitionIn) -> SagaChange:
    s, st, e = event.saga, event.step, event.event
    record = SagaRecord(
        id=s.id,
        name=s.name,
        status=s.status,
        created_at=s.created_at,
        updated_at=s.updated_at,
        seq=s.seq,
        next_step_number=s.next_step_number,
        options=s.options,
        state=s.state,
        failed_step=s.failed_step,
    )
    step = None
    if st is not None:
        step = StepSnapshot(
            id=st.id,
            position=st.position,
            tool_name=st.tool_name,
            state=st.state,
            input=st.input,
            output=st.output,
            error=st.error,
            error_type=st.error_type,
            traceback=st.traceback,
            has_undo=st.has_undo,
            requires_approval=st.requires_approval,
            reversibility=st.reversibility,
            idempotency_key=st.idempotency_key,
            created_at=st.created_at,
            updated_at=st.updated_at,
            completed_at=st.completed_at,
            compensation_attempts=tuple(
                CompensationAttempt(
                    a.number,
                    a.started_at,
                    a.finished_at,
                    AttemptOutcome(a.outcome) if a.outcome else None,
                    a.error,
                    a.actor,
                )
                for a in st.attempts
            ),
            decision_note=st.decision_note,
            decided_by=st.decided_by,
            metadata=st.metadata,
        )
    info = SagaEvent(
        s.id, s.name, e.seq, e.kind, e.to_state, e.from_state, e.at, e.step_id, e.tool_name,
        e.actor, e.detail,
    )  # fmt: skip
    return SagaChange(record, step, info)

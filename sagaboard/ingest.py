"""Ingestion of transition events from agents (the SDK's SagaboardStore).

One call is one transaction: every event applies, or none does and the error
names the first bad one. An event repeated with its ``event_id`` (an SDK retry)
is answered as a duplicate; each move is checked against undo_core's own
transition tables before it is stored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal

import orjson
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from sagaboard import limits, notifications, rollback_outcomes
from sagaboard.bulk import InSelect, Rows, round_trip, send_select, table
from sagaboard.models import CompensationAttempt, Event, Project, Saga, Step
from sagaboard.schemas import TransitionIn
from sagaboard.storage import copy_saga, copy_step, event_fields, new_attempts
from undo_core import (
    AttemptOutcome,
    EventKind,
    RollbackAssessment,
    SagaChange,
    SagaEvent,
    SagaRecord,
    SagaStatus,
    StepFacts,
    StepSnapshot,
    StepState,
    TransitionError,
    assess_rollback,
)
from undo_core import CompensationAttempt as AttemptRecord
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


_SAGA_COLUMNS = [
    "name", "status", "updated_at", "seq", "next_step_number", "options",
    "state", "failed_step", "lease_owner", "lease_expires_at", "changed_at",
    "outcome", "outcome_summary", "waiting_for",
]  # fmt: skip
_STEP_COLUMNS = [
    "position", "tool_name", "state", "input", "output", "error", "error_type", "traceback",
    "has_undo", "requires_approval", "reversibility", "idempotency_key", "created_at",
    "updated_at", "completed_at", "decision_note", "decided_by", "metadata", "undo",
    "changed_at",
]  # fmt: skip
_EVENT_COLUMNS = [
    "project_id", "saga_id", "seq", "client_event_id", "digest", "kind", "step_id",
    "tool_name", "from_state", "to_state", "at", "actor", "detail", "recorded_at",
]  # fmt: skip
_SAGA_NEW_COLUMNS = [
    "project_id", "saga_id", "driver", "created_at", "received_at", "posted_by_token_id",
    *_SAGA_COLUMNS,
]  # fmt: skip
_ATTEMPT_COLUMNS = ["step_id", "number", "started_at", "finished_at", "outcome", "error", "actor"]


class _Batch:
    """The rows a batch touches, loaded once, changed in memory, written in bulk.

    A batch of N events costs a constant number of queries, not N times a few,
    and rows are plain namespaces written with ``executemany``: that is what lets
    one request carry a thousand events.
    """

    def __init__(self, project: Project, events: list[TransitionIn]) -> None:
        self.project = project
        saga_ids = list({e.saga.id for e in events})
        with round_trip():
            # Lock the sagas this batch changes: concurrent batches for one saga serialise
            # here. Only what validation reads is loaded; written columns come from events.
            sagas = send_select(
                Saga,
                ["id", "project_id", "saga_id", "driver", "status", "seq"],
                {"project": project.pk, "saga_id": saga_ids},
                for_update=True,
            )
            # Sent after the lock, so read after it (statements run in order): a
            # concurrent batch on these sagas has committed by the time these run.
            seen = send_select(
                Event,
                ["client_event_id", "digest", "id"],
                {"project": project.pk, "client_event_id": [e.event_id for e in events]},
            )
            steps = send_select(
                Step,
                ["id", "saga_id", "step_id", "state", "undo"],
                {
                    "saga": InSelect(Saga, "id", {"project": project.pk, "saga_id": saga_ids}),
                    "step_id": list({e.step.id for e in events if e.step is not None}),
                },
            )
        self.sagas = {row.saga_id: row for row in sagas.fetch()}
        self.seen = {row.client_event_id: (row.digest, row.id) for row in seen.fetch()}
        # The server's clock, read once the sagas are locked: what this batch stores is
        # received and changed now, whatever times its events carry (sagaboard.clock).
        self.now = timezone.now()
        for row in self.sagas.values():
            row.pk, row.created_at = row.id, None
        by_pk = {s.pk: s.saga_id for s in self.sagas.values()}
        self.steps = {}
        for row in steps.fetch():
            row.pk, row.undo = row.id, json.loads(row.undo) if row.undo else {}
            self.steps[(by_pk[row.saga_id], row.step_id)] = row
        self.attempts: dict[int, set[int]] = {}
        if any(e.step is not None and e.step.attempts for e in events):
            for step_pk, number in CompensationAttempt.objects.filter(
                step_id__in=[s.pk for s in self.steps.values()]
            ).values_list("step_id", "number"):
                self.attempts.setdefault(step_pk, set()).add(number)
        self.step_counts: dict[str, int] | None = None
        self.token_pk: int | None = None
        self.failed_undos: list[tuple[str, str]] = []
        self.rolled_back: list[str] = []
        """Sagas this batch ended ROLLED_BACK (announced if not clean)."""
        self.assessments: dict[str, RollbackAssessment] = {}
        self.dirty_steps: dict[tuple[str, str], StepSnapshot] = {}
        self.events: list[tuple[SimpleNamespace, SagaEvent, str, str]] = []

    def step(self, saga: Any, step_id: str) -> Any:
        return self.steps.get((saga.saga_id, step_id))

    def step_added(self, saga_id: str) -> int:
        """The saga's step count with one more; stored steps are counted in one query, once."""
        if self.step_counts is None:
            pks = {s.pk: s.saga_id for s in self.sagas.values() if s.pk is not None}
            rows = Step.objects.filter(saga_id__in=list(pks)).values_list("saga_id")
            self.step_counts = {pks[pk]: n for pk, n in rows.annotate(n=Count("id"))}
        self.step_counts[saga_id] = self.step_counts.get(saga_id, 0) + 1
        return self.step_counts[saga_id]

    def apply(self, event: TransitionIn, digest: str) -> None:
        record, snapshot, info = _change(event)
        saga = self.sagas.get(record.id)
        if saga is None:
            saga = SimpleNamespace(
                pk=None, saga_id=record.id, driver=Saga.Driver.CLIENT, created_at=None
            )
            saga.received_at = self.now
            self.sagas[record.id] = saga
        saga.dirty = True
        copy_saga(saga, record)
        saga.changed_at = self.now
        if snapshot is not None:
            key = (saga.saga_id, snapshot.id)
            row = self.steps.get(key)
            if row is None:
                row = self.steps[key] = SimpleNamespace(
                    pk=None, saga_id=None, step_id=snapshot.id, undo={}
                )
            copy_step(row, snapshot, driver=saga.driver)
            row.changed_at = self.now
            self.dirty_steps[key] = snapshot
        self.events.append((saga, info, event.event_id, digest))
        if info.step_id is not None and info.to_state == StepState.ROLLBACK_FAILED:
            self.failed_undos.append((saga.saga_id, info.step_id))
        if info.step_id is None and info.to_state == SagaStatus.ROLLED_BACK:
            self.rolled_back.append(saga.saga_id)

    def settle_outcomes(self) -> None:
        """Each changed saga's outcome columns, from its stored steps and this batch's.

        Only sagas rolling back need their steps: one query for all of them, none for
        a batch that only records forward steps.
        """
        dirty = [s for s in self.sagas.values() if getattr(s, "dirty", False)]
        rolling = {id(s) for s in dirty if s.status in rollback_outcomes.ROLLING}
        stored = rollback_outcomes.stored_facts(
            [s.pk for s in dirty if id(s) in rolling and s.pk is not None]
        )
        sent: dict[str, dict[str, StepSnapshot]] = {}
        for (saga_id, step_id), snapshot in self.dirty_steps.items():
            sent.setdefault(saga_id, {})[step_id] = snapshot
        for saga in dirty:
            steps = dict(stored.get(saga.pk, {})) if id(saga) in rolling else {}
            if id(saga) in rolling:
                for step_id, snapshot in sent.get(saga.saga_id, {}).items():
                    known = steps.get(step_id)
                    steps[step_id] = StepFacts.of(snapshot, left=bool(known and known.left))
            found = assess_rollback(SagaStatus(saga.status), steps.values())
            self.assessments[saga.saga_id] = found
            for name, value in rollback_outcomes.fields(found).items():
                setattr(saga, name, value)

    def write(self) -> dict[str, int]:
        """Write every changed row; the log id of each event, by its ``event_id``.

        On PostgreSQL one round trip when every saga exists already, two when the batch
        creates sagas (steps and events need their keys), and one more for compensation
        attempts (rare: they need new steps' keys).
        """
        self.settle_outcomes()
        new = [s for s in self.sagas.values() if s.pk is None]
        for s in new:
            s.project_id, s.posted_by_token_id = self.project.pk, self.token_pk
        with round_trip():
            table(Saga, _SAGA_COLUMNS).update(
                s for s in self.sagas.values() if s.pk is not None and getattr(s, "dirty", False)
            )
            saga_keys = table(Saga, _SAGA_NEW_COLUMNS).insert(new, returning=["id", "saga_id"])
            if not new:
                step_keys, logged = self._send_steps_and_events()
        if new:
            for row in saga_keys.fetch():
                self.sagas[row.saga_id].pk = row.id
            with round_trip():
                step_keys, logged = self._send_steps_and_events()
        fresh = {(row.saga_id, row.step_id): row for row in self.steps.values() if row.pk is None}
        for key in step_keys.fetch():
            fresh[(key.saga_id, key.step_id)].pk = key.id
        attempts = []
        for key, snapshot in self.dirty_steps.items():
            row = self.steps[key]
            attempts += new_attempts(row.pk, snapshot, self.attempts.get(row.pk, set()))
        table(CompensationAttempt, _ATTEMPT_COLUMNS).insert(attempts)
        return {row.client_event_id: row.id for row in logged.fetch()}

    def _send_steps_and_events(self) -> tuple[Rows, Rows]:
        """Send the step and event writes (every saga has its key by now)."""
        steps = [self.steps[key] for key in self.dirty_steps]
        for (saga_id, _), row in zip(self.dirty_steps, steps, strict=True):
            row.saga_id = self.sagas[saga_id].pk
        table(Step, _STEP_COLUMNS).update(row for row in steps if row.pk is not None)
        step_keys = table(Step, ["saga_id", "step_id", *_STEP_COLUMNS]).insert(
            (row for row in steps if row.pk is None), returning=["id", "saga_id", "step_id"]
        )
        logged = table(Event, _EVENT_COLUMNS).insert(
            (
                SimpleNamespace(
                    **event_fields(saga, info, client_id, digest),
                    saga_id=saga.pk,
                    recorded_at=self.now,
                )
                for saga, info, client_id, digest in self.events
            ),
            returning=["id", "client_event_id"],
        )
        return step_keys, logged


def events_ingest(
    *,
    project: Project,
    events: list[TransitionIn],
    token_pk: int | None = None,
    sent: Sequence[Any] | None = None,
) -> list[IngestResult]:
    """Apply a batch of transition events atomically, in order.

    ``token_pk`` (the posting token) is kept on sagas this batch creates: neither that
    token nor the person who made it may approve their undos. ``sent``: the events as
    parsed from the request body, one per event, for their digests.
    """
    with transaction.atomic():
        batch = _Batch(project, events)
        batch.token_pk = token_pk
        digests: dict[str, str] = {}
        duplicates: set[int] = set()
        for index, event in enumerate(events):
            try:
                digest = _digest(event, None if sent is None else sent[index])
                known = batch.seen.get(event.event_id, (digests.get(event.event_id), 0))[0]
                if known is not None:
                    if not _same_event(known, digest, event):
                        raise IngestError(
                            409,
                            "conflict",
                            f"event_id {event.event_id!r} was already used for a different event",
                            "event_id",
                        )
                    duplicates.add(index)
                    continue
                _check_move(batch, event)
                batch.apply(event, digest)
                digests[event.event_id] = digest
            except IngestError as err:
                err.index, err.event_id = index, event.event_id
                raise
        try:
            log_ids = batch.write()
            _announce_failed_undos(project, batch.failed_undos)
            _announce_rolled_back(project, batch)
        except IntegrityError as err:
            # A concurrent request created the same saga or event first; nothing of this
            # one was applied, and a retry will find its events stored (duplicates).
            raise IngestError(503, "busy", f"a concurrent request won; retry: {err}") from err
    log_ids.update({cid: pk for cid, (_, pk) in batch.seen.items()})
    return [
        IngestResult(e.event_id, "duplicate" if i in duplicates else "applied", log_ids[e.event_id])
        for i, e in enumerate(events)
    ]


def _announce_failed_undos(project: Project, failed: list[tuple[str, str]]) -> None:
    """Notification outbox rows for undos that just ended ROLLBACK_FAILED (rare: a query each)."""
    from sagaboard.notifications import notify_rollback_failed

    for saga_id, step_id in failed:
        step = Step.objects.select_related("saga__project").get(
            saga__project=project, saga__saga_id=saga_id, step_id=step_id
        )
        notify_rollback_failed(step.saga, step)


def _announce_rolled_back(project: Project, batch: _Batch) -> None:
    """Outbox rows for sagas this batch ended ROLLED_BACK with exceptions."""
    for saga_id in batch.rolled_back:
        found = batch.assessments.get(saga_id)
        if found is not None and not found.clean and batch.sagas[saga_id].status == "ROLLED_BACK":
            saga = Saga.objects.select_related("project").get(project=project, saga_id=saga_id)
            notifications.notify_rolled_back(saga, found)


def _digest(event: TransitionIn, sent: Any) -> str:
    """The SHA-256 of the event as the client sent it (its JSON object, keys sorted).

    A re-delivery sends the same JSON. Serialising the validated model instead (as
    digests were first made, and still are without ``sent``) cost 30 us an event.
    """
    if sent is None:
        return hashlib.sha256(_legacy_form(event)).hexdigest()
    try:
        canonical = orjson.dumps(sent, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer past 64 bits: the same event always lands here
        canonical = json.dumps(sent, sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(canonical).hexdigest()


def _legacy_form(event: TransitionIn) -> bytes:
    # How digests were made before they hashed the event as sent; events stored then are
    # still recognised when re-delivered (``_same_event``).
    return event.model_dump_json().encode()


def _same_event(known: str, digest: str, event: TransitionIn) -> bool:
    return known == digest or known == hashlib.sha256(_legacy_form(event)).hexdigest()


def _check_move(batch: _Batch, event: TransitionIn) -> None:
    """Refuse what undo_core's state machine forbids, naming the rule."""
    info, saga_in, step_in = event.event, event.saga, event.step
    if info.seq != saga_in.seq:
        raise IngestError(422, "validation_error", "event.seq must equal saga.seq", "event.seq")
    saga = batch.sagas.get(saga_in.id)
    if saga is not None and saga.driver == Saga.Driver.SERVER:
        # Its steps, states and undos change only through the manual-flow API and the
        # workers: events could otherwise rewrite what an approver approved.
        raise IngestError(
            409,
            "conflict",
            f"saga {saga_in.id!r} is run by sagaboard: change it through /api/v1/sagas/, "
            "not transition events",
            "saga.id",
        )
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
            stored = batch.step(saga, step_in.id) if saga and step_in else None
            _check_step_move(stored, step_in, info.from_state, info.to_state)
            if info.from_state is None and batch.step_added(saga_in.id) > limits.max_steps():
                raise IngestError(
                    422,
                    "limit_exceeded",
                    f"a saga has at most {limits.max_steps()} steps (SAGABOARD_MAX_STEPS)",
                    "step.id",
                )
        elif step_in is None and info.kind is EventKind.ATTEMPT:
            raise IngestError(422, "validation_error", "an attempt event needs its step", "step")
    except TransitionError as err:
        raise IngestError(409, "illegal_transition", str(err), "event.to_state") from err


def _check_saga_move(saga: Any, status: SagaStatus, frm: str | None, to: str) -> None:
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


def _check_step_move(stored: Any, step: Any, frm: str | None, to: str) -> None:
    if step is None:
        raise IngestError(422, "validation_error", "a step event needs its step", "step")
    if to != step.state:
        raise IngestError(
            422, "validation_error", "event.to_state must equal step.state", "event.to_state"
        )
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
                AttemptRecord(
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

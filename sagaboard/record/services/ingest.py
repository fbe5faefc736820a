"""Ingestion of transition events from agents (the SDK's SagaboardStore).

One call is one transaction: every event applies, or none does and the error
names the first bad one. An event repeated with its ``event_id`` (an SDK retry)
is answered as a duplicate; every event, whatever its kind, is checked by
undo_core's rules (``undo_core.check_change``: the transition tables and what each
kind of event may change) against what is stored, and kept in the log as it was
accepted (``Event.change``) so that the log replays to the record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, Literal

import orjson
from django.db import IntegrityError, transaction
from django.utils import timezone

from sagaboard.actions.services import saga_stop
from sagaboard.api.event_schema import TransitionIn
from sagaboard.engine.reads import rollback_outcomes
from sagaboard.engine.services.django_store import copy_saga, copy_step, event_fields, new_attempts
from sagaboard.engine.services.record_columns import (
    SAGA_MIRRORED,
    SAGA_RENAMED,
    STEP_MIRRORED,
    STEP_OWN_ROWS,
    STEP_RENAMED,
    raw_reader,
    record_from,
    record_of,
)
from sagaboard.errors import ServiceError
from sagaboard.infra.http import limits
from sagaboard.models import CompensationAttempt, Event, Project, Saga, Step
from sagaboard.models.sagas import elapsed_ms
from sagaboard.notify.services import notifications
from sagaboard.record.services.ingest_bulk import InSelect, Rows, round_trip, send_select, table
from undo_core import (
    ChangeRefused,
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
    check_change,
)
from undo_core import CompensationAttempt as AttemptRecord


class IngestError(ServiceError):
    """An event the server refuses; ``index`` and ``event_id`` name it in its batch."""


@dataclass(frozen=True)
class IngestResult:
    event_id: str
    status: Literal["applied", "duplicate"]
    log_id: int


@dataclass(frozen=True)
class Ingested:
    """What a stored batch answers: each event's result, and the rollbacks operators asked
    of its sagas that the agent must hear (``saga_stop.after_batch``)."""

    results: list[IngestResult]
    rollback_requested: list[dict[str, Any]]


# What the rules compare of a stored saga and step (undo_core's SagaRecord, StepSnapshot).
_SAGA_RECORD = list(SAGA_MIRRORED)
_STEP_RECORD = [name for name in STEP_MIRRORED if name not in STEP_OWN_ROWS]
# Written on every change: the record's columns (all but its id and when it began) and the
# server's own (its clock, the rollback outcome kept on the row).
_SAGA_COLUMNS = [
    *(name for name in SagaRecord._fields if name not in ("id", "created_at")),
    "changed_at", "duration_ms", "outcome", "outcome_summary", "waiting_for",
]  # fmt: skip
_STEP_COLUMNS = [*_STEP_RECORD, "undo", "changed_at"]
_stored_saga = raw_reader(Saga, SagaRecord, _SAGA_RECORD, SAGA_RENAMED)
_stored_step = raw_reader(Step, StepSnapshot, _STEP_RECORD, STEP_RENAMED)
_EVENT_COLUMNS = [
    "project_id", "saga_id", "seq", "client_event_id", "digest", "kind", "step_id",
    "tool_name", "from_state", "to_state", "at", "actor", "detail", "recorded_at", "change",
]  # fmt: skip
_SAGA_NEW_COLUMNS = [
    "project_id", "saga_id", "driver", "created_at", "received_at", "posted_by_token_id",
    *_SAGA_COLUMNS,
]  # fmt: skip
_ATTEMPT_COLUMNS = ["step_id", *AttemptRecord._fields]
# Only a step that was COMPENSATING has undo attempts: others need no attempt query.
_MAY_HAVE_ATTEMPTS = {
    StepState.COMPENSATING, StepState.ROLLED_BACK, StepState.ROLLBACK_FAILED, StepState.RESOLVED
}  # fmt: skip


def _aware(value: Any) -> datetime:
    """A datetime column as a raw read gives it (SQLite: naive UTC, or text), made aware."""
    at = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


class _Batch:
    """The rows a batch touches, loaded once, changed in memory, written in bulk.

    A batch of N events costs a constant number of queries, not N times a few,
    and rows are plain namespaces written with ``executemany``: that is what lets
    one request carry a thousand events. Beside the rows it keeps, as undo_core's
    records, what is stored (and then accepted) for each saga and step it touches:
    every event is checked against that by ``undo_core.check_change``.
    """

    def __init__(self, project: Project, events: list[TransitionIn]) -> None:
        self.project = project
        saga_ids = list({e.saga.id for e in events})
        with round_trip():
            # Lock the sagas this batch changes: concurrent batches for one saga serialise
            # here. What the rules compare is loaded; written columns come from events.
            # With them, whether an operator asked for a rollback the agent must hear
            # (saga_stop.after_batch): read under the lock, no query of its own.
            sagas = send_select(
                Saga, ["id", "project_id", "saga_id", "driver", "received_at", *_SAGA_RECORD,
                       *saga_stop.REQUEST_COLUMNS], {
                    "project": project.pk, "saga_id": saga_ids
                }, for_update=True,
            )  # fmt: skip
            # Sent after the lock, so read after it (statements run in order): a
            # concurrent batch on these sagas has committed by the time these run.
            seen = send_select(
                Event,
                ["client_event_id", "digest", "id"],
                {"project": project.pk, "client_event_id": [e.event_id for e in events]},
            )
            steps = send_select(
                Step,
                ["id", "saga_id", "step_id", "undo", *_STEP_RECORD],
                {
                    "saga": InSelect(Saga, "id", {"project": project.pk, "saga_id": saga_ids}),
                    "step_id": list({e.step.id for e in events if e.step is not None}),
                },
            )
        self.sagas = {row.saga_id: row for row in sagas.fetch()}
        self.seen = {row.client_event_id: (row.digest, row.id) for row in seen.fetch()}
        # The server's clock, read once the sagas are locked: what this batch stores is
        # received and changed now, whatever times its events carry (sagaboard.infra.clock).
        self.now = timezone.now()
        self.records: dict[str, SagaRecord] = {}
        for row in self.sagas.values():
            row.pk = row.id
            row.received_at = _aware(row.received_at)
            self.records[row.saga_id] = _stored_saga(row)
            row.created_at = None
        by_pk = {s.pk: s.saga_id for s in self.sagas.values()}
        self.steps = {}
        for row in steps.fetch():
            if row.saga_id not in by_pk:
                # Its saga was created by a concurrent batch after the lock above found none:
                # this batch takes it for new, its insert conflicts, and the batch is retried.
                continue
            row.pk, row.undo = row.id, json.loads(row.undo) if row.undo else {}
            self.steps[(by_pk[row.saga_id], row.step_id)] = row
        self._load_snapshots(events)
        # Each saga's steps as the rules see them (state, has_undo), loaded when first needed.
        self.facts: dict[str, dict[str, Any]] | None = None
        self.token_pk: int | None = None
        self.failed_undos: list[tuple[str, str]] = []
        self.rolled_back: list[str] = []
        """Sagas this batch ended ROLLED_BACK (announced if not clean)."""
        self.assessments: dict[str, RollbackAssessment] = {}
        self.dirty_steps: dict[tuple[str, str], StepSnapshot] = {}
        self.events: list[tuple[SimpleNamespace, SagaEvent, str, str, str]] = []

    def _load_snapshots(self, events: list[TransitionIn]) -> None:
        """What is stored (then accepted) of each step this batch touches, attempts and all.

        The attempts are read only when a step may have some or an event carries some: most
        batches (forward steps) pay no query for them."""
        self.snaps: dict[tuple[str, str], StepSnapshot] = {}
        attempts: dict[int, list[AttemptRecord]] = {}
        if any(row.state in _MAY_HAVE_ATTEMPTS for row in self.steps.values()) or any(
            e.step is not None and e.step.attempts for e in events
        ):
            for a in CompensationAttempt.objects.filter(
                step_id__in=[s.pk for s in self.steps.values()]
            ).order_by("number"):
                attempts.setdefault(a.step_id, []).append(_attempt(a))
        for key, row in self.steps.items():
            self.snaps[key] = _stored_step(
                row, compensation_attempts=tuple(attempts.get(row.pk, ()))
            )
        self.attempts = {pk: {a.number for a in found} for pk, found in attempts.items()}

    def stops_pending(self) -> list[tuple[str, str]]:
        """(saga id, status after this batch) of each saga with a rollback request open."""
        return [
            (row.saga_id, row.status)
            for row in self.sagas.values()
            if getattr(row, "rollback_requested_at", None) is not None
            and getattr(row, "rollback_request_done_at", None) is None
        ]

    def step(self, saga_id: str, step_id: str) -> StepSnapshot | None:
        return self.snaps.get((saga_id, step_id))

    def step_facts(self, saga_id: str) -> dict[str, Any]:
        """The saga's steps' states (one query for every stored saga of the batch, once)."""
        if self.facts is None:
            pks = {s.pk: s.saga_id for s in self.sagas.values() if s.pk is not None}
            self.facts = {saga_id: {} for saga_id in self.sagas}
            # Without the ORM's query building: it cost more than the query (about 0.5 ms).
            fields = ["saga_id", "step_id", "state", "has_undo"]
            for row in send_select(Step, fields, {"saga": list(pks)}).fetch():
                self.facts[pks[row.saga_id]][row.step_id] = SimpleNamespace(
                    state=row.state,
                    has_undo=bool(row.has_undo),  # SQLite's driver: 0 or 1
                )
            for (saga_id_, step_id), snap in self.dirty_steps.items():  # changed in this batch
                self.facts[saga_id_][step_id] = snap
        return self.facts.setdefault(saga_id, {})

    def apply(self, change: SagaChange, client_id: str, digest: str, payload: str) -> None:
        record, snapshot, info = change
        saga = self.sagas.get(record.id)
        if saga is None:
            saga = SimpleNamespace(
                pk=None, saga_id=record.id, driver=Saga.Driver.CLIENT, created_at=None
            )
            saga.received_at = self.now
            self.sagas[record.id] = saga
            if self.facts is not None:
                self.facts[record.id] = {}
        saga.dirty = True
        copy_saga(saga, record)
        saga.changed_at = self.now
        saga.duration_ms = elapsed_ms(saga.received_at, self.now)
        self.records[record.id] = record
        if snapshot is not None:
            key = (saga.saga_id, snapshot.id)
            row = self.steps.get(key)
            if row is None:
                row = self.steps[key] = SimpleNamespace(
                    pk=None, saga_id=None, step_id=snapshot.id, undo={}
                )
            copy_step(row, snapshot, driver=saga.driver)
            row.changed_at = self.now
            self.dirty_steps[key] = self.snaps[key] = snapshot
            if self.facts is not None:
                self.facts.setdefault(saga.saga_id, {})[snapshot.id] = snapshot
        self.events.append((saga, info, client_id, digest, payload))
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
                    change=payload,
                )
                for saga, info, client_id, digest, payload in self.events
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
) -> Ingested:
    """Apply a batch of transition events atomically, in order; then answer the rollback
    requests of its sagas (closing those its events carried out).

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
                digest, payload = _digest(event, None if sent is None else sent[index])
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
                change = change_of(event)
                _check_move(batch, change)
                batch.apply(change, event.event_id, digest, payload)
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
    results = [
        IngestResult(e.event_id, "duplicate" if i in duplicates else "applied", log_ids[e.event_id])
        for i, e in enumerate(events)
    ]
    return Ingested(results, saga_stop.after_batch(project, batch.stops_pending()))


def _announce_failed_undos(project: Project, failed: list[tuple[str, str]]) -> None:
    """Notification outbox rows for undos that just ended ROLLBACK_FAILED (rare: a query each)."""
    for saga_id, step_id in failed:
        step = Step.objects.select_related("saga__project").get(
            saga__project=project, saga__saga_id=saga_id, step_id=step_id
        )
        notifications.notify_rollback_failed(step.saga, step)


def _announce_rolled_back(project: Project, batch: _Batch) -> None:
    """Outbox rows for sagas this batch ended ROLLED_BACK with exceptions."""
    for saga_id in batch.rolled_back:
        found = batch.assessments.get(saga_id)
        if found is not None and not found.clean and batch.sagas[saga_id].status == "ROLLED_BACK":
            saga = Saga.objects.select_related("project").get(project=project, saga_id=saga_id)
            notifications.notify_rolled_back(saga, found)


def _digest(event: TransitionIn, sent: Any) -> tuple[str, str]:
    """The SHA-256 of the event as the client sent it (its JSON object, keys sorted), and
    that JSON as text: the log keeps it as the change the event made (``Event.change``),
    so a replay re-reads exactly what was accepted, at the cost of no second encoding.

    A re-delivery sends the same JSON. Serialising the validated model instead (the form
    used when ``sent`` is None) costs 30 us an event.
    """
    if sent is None:
        canonical = _legacy_form(event)
        return hashlib.sha256(canonical).hexdigest(), canonical.decode()
    try:
        canonical = orjson.dumps(sent, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer past 64 bits: the same event always lands here
        canonical = json.dumps(sent, sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(canonical).hexdigest(), canonical.decode()


def _legacy_form(event: TransitionIn) -> bytes:
    # The validated model as JSON: the digest when the sent JSON is not at hand, and the one
    # stored with events in databases written before ``sent`` was hashed, so a re-delivery
    # of such an event is still recognised (``_same_event``).
    return event.model_dump_json().encode()


def _same_event(known: str, digest: str, event: TransitionIn) -> bool:
    return known == digest or known == hashlib.sha256(_legacy_form(event)).hexdigest()


# How each of undo_core's rules answers over HTTP (anything else: 409).
_UNPROCESSABLE = {"validation_error", "unknown_saga", "unknown_step", "limit_exceeded"}


def _check_move(batch: _Batch, change: SagaChange) -> None:
    """Refuse what undo_core's rules forbid (``undo_core.check_change``), naming rule and field."""
    record, snap, info = change
    saga = batch.sagas.get(record.id)
    if saga is not None and saga.driver == Saga.Driver.SERVER:
        # Its steps, states and undos change only through the manual-flow API and the
        # workers: events could otherwise rewrite what an approver approved.
        raise IngestError(
            409,
            "conflict",
            f"saga {record.id!r} is run by sagaboard: change it through /api/v1/sagas/, "
            "not transition events",
            "saga.id",
        )
    stored = batch.records.get(record.id) if saga is not None else None
    step = batch.step(record.id, snap.id) if snap is not None else None
    facts: Any = ()
    if stored is not None and (
        (info.kind is EventKind.STEP and info.from_state is None) or info.kind is EventKind.SAGA
    ):
        facts = batch.step_facts(record.id).values()
    try:
        check_change(stored, step, change, steps=facts, max_steps=limits.max_steps())
    except ChangeRefused as err:
        message = str(err)
        if err.rule == "limit_exceeded":
            message = f"a saga has at most {limits.max_steps()} steps (SAGABOARD_MAX_STEPS)"
        status = 422 if err.rule in _UNPROCESSABLE else 409
        code = "illegal_transition" if err.rule == "fixed_field" else err.rule
        raise IngestError(status, code, message, err.field) from err
    except TransitionError as err:
        raise IngestError(409, "illegal_transition", str(err), "event.to_state") from err


def _attempt(a: Any) -> AttemptRecord:
    """An attempt as undo_core records it, from a stored row or an event's attempt."""
    attempt: AttemptRecord = record_from(AttemptRecord, a)
    return attempt


def change_of(event: TransitionIn) -> SagaChange:
    """The undo_core change a transition event carries (also how a replay reads the log)."""
    s, st, e = event.saga, event.step, event.event
    record: SagaRecord = record_of(SagaRecord, s)
    step = None
    if st is not None:
        attempts = tuple(_attempt(a) for a in st.attempts)
        step = record_of(StepSnapshot, st, compensation_attempts=attempts)
    info = SagaEvent(
        s.id, s.name, e.seq, e.kind, e.to_state, e.from_state, e.at, e.step_id, e.tool_name,
        e.actor, e.detail,
    )  # fmt: skip
    return SagaChange(record, step, info)

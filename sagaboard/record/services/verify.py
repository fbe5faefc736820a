"""The record's invariant, checked: replaying a saga's event log gives its stored saga and steps.

Every engine event (``seq`` set) keeps the change it made (``Event.change``), as
accepted: the transition event of docs/api.md, whoever wrote it (an agent through
``POST /api/v1/events``, or sagaboard's own engine through ``DjangoStore``: the
manual-flow API, workers, the demo). :func:`verify` reads those changes in ``seq``
order through the API's own parsing, folds them through ``undo_core.replay`` (every
change must pass ``undo_core.check_change`` again) and compares the result with
what is stored, field by field.

What it does not replay, and why:

* operators' events (``seq`` NULL: decisions, retries asked for, "leave failed"):
  they change no field that mirrors undo_core's records (their effects reach the
  record as engine events, from a worker or the agent); were one to change such a
  field, the comparison would show it as a difference;
* a saga's lease (``lease_owner``, ``lease_expires_at``): it is taken, renewed and
  released outside events, to coordinate processes; it is not part of the record;
* columns that are sagaboard's own (server times, who posted the saga, an
  operator's pending action or "left failed" mark): they mirror nothing in undo_core.

A saga with an engine event logged before changes were kept cannot be replayed: it
is reported as such (one difference naming the event), never silently passed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Prefetch
from pydantic import ValidationError

from sagaboard.api.event_schema import EventBatchIn
from sagaboard.engine.services.django_store import saga_record, step_snapshot
from sagaboard.engine.services.record_columns import SAGA_MIRRORED, STEP_MIRRORED
from sagaboard.models import Event, Saga, Step
from sagaboard.record.services.ingest import change_of
from undo_core import EventKind, SagaChange, SagaEvent, SagaSnapshot, TransitionError, replay
from undo_core.remote import saga_from_json, step_from_json

__all__ = ["SAGA_FIELDS", "STEP_FIELDS", "Difference", "VerifyReport", "verify"]

SAGA_FIELDS = SAGA_MIRRORED
STEP_FIELDS = STEP_MIRRORED
_CHUNK = 100


@dataclass(frozen=True)
class Difference:
    """One field whose stored value is not what the event log replays to."""

    project: str
    saga: str
    step: str | None
    field: str
    stored: Any
    replayed: Any

    def __str__(self) -> str:
        where = f"{self.project}/{self.saga}" + (f" {self.step}" if self.step else "")
        return f"{where} {self.field}: stored {self.stored!r}, replayed {self.replayed!r}"


@dataclass
class VerifyReport:
    sagas: int = 0
    events: int = 0
    differences: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


def verify(*, project: str | None = None, saga_id: str | None = None) -> VerifyReport:
    """Replay the event log of every saga in range (a project's slug, a saga id) and compare."""
    sagas = Saga.objects.select_related("project").order_by("pk")
    if project is not None:
        sagas = sagas.filter(project__slug=project)
    if saga_id is not None:
        sagas = sagas.filter(saga_id=saga_id)
    report = VerifyReport()
    for chunk in _chunks(sagas):
        changes: dict[int, list[tuple[int, str | None]]] = {s.pk: [] for s in chunk}
        events = (
            Event.objects.filter(saga_id__in=list(changes), seq__isnull=False)
            .order_by("saga_id", "seq")
            .values_list("saga_id", "seq", "change")
        )
        for saga_pk, seq, change in events:
            changes[saga_pk].append((seq, change))
        for saga in chunk:
            report.sagas += 1
            report.events += len(changes[saga.pk])
            report.differences += _verify_saga(saga, changes[saga.pk])
    return report


def _chunks(sagas: Any) -> Iterator[list[Saga]]:
    steps = Prefetch("steps", Step.objects.prefetch_related("attempts"))
    last = 0
    while True:
        chunk = list(sagas.filter(pk__gt=last).prefetch_related(steps)[:_CHUNK])
        if not chunk:
            return
        yield chunk
        last = chunk[-1].pk


def _verify_saga(saga: Saga, logged: list[tuple[int, str | None]]) -> list[Difference]:
    slug = saga.project.slug

    def differ(step: str | None, name: str, stored: Any, replayed: Any) -> Difference:
        return Difference(slug, saga.saga_id, step, name, _plain(stored), _plain(replayed))

    changes: list[SagaChange] = []
    undos: dict[str, Any] = {}
    for seq, text in logged:
        if text is None:
            why = "no change kept (logged before sagaboard kept changes): cannot replay"
            return [differ(None, "event log", f"event {seq}", why)]
        try:
            data = json.loads(text)
            undo = data.pop("undo", None)  # how a server-run step's undo runs, at its creation
            if data.pop("store", None) == "sagaboard":
                change = _engine_change(data)  # sagaboard's own engine wrote it
            else:  # an agent sent it: read as ingestion read it (the API's parsing)
                change = change_of(EventBatchIn.model_validate({"events": [data]}).events[0])
        except (ValueError, ValidationError, AttributeError, KeyError, TypeError) as err:
            return [differ(None, "event log", f"event {seq}", f"unreadable: {err}")]
        changes.append(change)
        if undo is not None and change.step is not None:
            undos.setdefault(change.step.id, undo)
    try:
        replayed = replay(changes)
    except TransitionError as err:
        name = getattr(err, "field", "event log")
        return [differ(None, name, "the stored event log", f"refused on replay: {err}")]
    return _compare(saga, replayed, undos, differ)


def _engine_change(data: dict[str, Any]) -> SagaChange:
    """A change ``DjangoStore`` logged, read back with undo_core's own wire format."""
    record = saga_from_json({**data["saga"], "steps": []}).record
    step = step_from_json(data["step"]) if data.get("step") else None
    e = data["event"]
    event = SagaEvent(
        record.id, record.name, e["seq"], EventKind(e["kind"]), e["to_state"], e["from_state"],
        datetime.fromisoformat(e["at"]), e["step_id"], e["tool_name"], e["actor"], e["detail"],
    )  # fmt: skip
    return SagaChange(record, step, event)


def _compare(
    saga: Saga, replayed: SagaSnapshot | None, undos: dict[str, Any], differ: Any
) -> list[Difference]:
    if replayed is None:
        return [differ(None, "event log", "a stored saga", "no engine event")]
    found: list[Difference] = []
    stored = saga_record(saga)
    for name in SAGA_FIELDS:
        mine, theirs = getattr(stored, name), getattr(replayed.record, name)
        if not _same(mine, theirs):
            found.append(differ(None, f"saga.{name}", mine, theirs))
    rows = {row.step_id: row for row in saga.steps.all()}
    replayed_steps = {s.id: s for s in replayed.steps}
    for step_id in sorted(rows.keys() - replayed_steps.keys()):
        found.append(differ(step_id, "step", "stored", "absent from the event log"))
    for step_id in sorted(replayed_steps.keys() - rows.keys()):
        found.append(differ(step_id, "step", "absent", "created by the event log"))
    default_undo = {"kind": "client"} if saga.driver == Saga.Driver.CLIENT else {}
    for step_id in sorted(rows.keys() & replayed_steps.keys()):
        row, theirs = rows[step_id], replayed_steps[step_id]
        mine = step_snapshot(row)
        for name in STEP_FIELDS:
            if not _same(getattr(mine, name), getattr(theirs, name)):
                found.append(
                    differ(step_id, f"step.{name}", getattr(mine, name), getattr(theirs, name))
                )
        undo = undos.get(step_id, default_undo)
        if not _same(row.undo or {}, undo):
            found.append(differ(step_id, "step.undo", row.undo, undo))
    return found


def _plain(value: Any) -> Any:
    """A value as a report shows it: JSON-like (enums as their names, times in ISO 8601)."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _same(a: Any, b: Any) -> bool:
    """Equal as stored: JSON values by their exact JSON (``1`` is not ``1.0`` nor ``true``)."""
    if a == b:
        try:
            return _canonical(a) == _canonical(b)
        except TypeError:
            return True  # times, attempts: == already compared them exactly
    return False


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)

"""The rules every stored change to a saga obeys, and the replay that checks a whole log.

A store keeps a saga as a record, its steps, and the log of changes that made
them. The transition tables (:mod:`undo_core.vocabulary.states`) say which status moves are
legal; this module says the rest, for each kind of event, so that nobody holding
a way to write changes (an agent's token, a bug) can rewrite the record around
the state machine:

* every change: ``seq`` grows; a saga's ``name``, ``created_at`` and ``options``
  never change; ``next_step_number`` never goes back; ``failed_step`` once set
  stays; only a ``saga`` event changes the status; the event names the step it
  carries (``step_id``, ``tool_name``) and the ``seq`` of the record;
* ``saga``: a move of :data:`~undo_core.SAGA_TRANSITIONS`, carrying no step; a
  new saga starts IN_PROGRESS; it ends COMPLETED, or starts compensating, only
  with no step PENDING; it ends ROLLED_BACK only when no step is left for a
  person (none awaiting approval, compensating, failed to roll back, in doubt,
  or completed with an undo not yet run), and ROLLBACK_FAILED only when one is;
* ``step``: a move of :data:`~undo_core.STEP_TRANSITIONS`; a new step starts
  PENDING, at the next position, in an IN_PROGRESS saga, within the step limit;
  a step's identity (tool name, input, idempotency key, reversibility, has_undo,
  requires_approval, position, created_at) never changes, nor its output and
  completion time once it left PENDING; PENDING -> COMPLETED needs an
  IN_PROGRESS saga, an undo's moves a saga COMPENSATING or ROLLBACK_FAILED;
* ``attempt``: appends undo attempts (numbers strictly increasing, recorded ones
  never rewritten) to a COMPENSATING step and changes nothing else of it;
* ``checkpoint``: changes the declarative ``state`` (and ``seq``, ``updated_at``)
  of a running saga, nothing else, and carries no step.

Undo attempts are append-only everywhere: a ``step`` event may add attempts only
as the step leaves COMPENSATING (the undo that just ran).

The engine passes its own changes through :func:`check_change` (so the rules and
the engine cannot disagree), and :func:`replay` folds a saga's log through it:
the result must be exactly what a store holds.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterable
from typing import Any, Protocol

from ..vocabulary.errors import ChangeRefused
from ..vocabulary.records import EventKind, SagaEvent, SagaRecord, SagaSnapshot, StepSnapshot
from ..vocabulary.states import (
    STEP_TRANSITIONS,
    SagaStatus,
    StepState,
    check_saga_transition,
    check_step_transition,
)
from .storage import SagaChange

__all__ = ["IDENTITY", "MOVABLE", "StepView", "check_change", "is_unsettled", "replay"]


class StepView(Protocol):
    """What the rules read of a saga's other steps (a :class:`StepSnapshot` has it)."""

    @property
    def state(self) -> str: ...

    @property
    def has_undo(self) -> bool: ...


#: States in which a step still carries a side effect that nobody has settled.
OPEN_STATES = frozenset(
    {
        StepState.ROLLBACK_FAILED,
        StepState.IN_DOUBT,
        StepState.AWAITING_APPROVAL,
        StepState.COMPENSATING,
    }
)
#: Saga statuses in which undos run (and a person may retry or resolve one).
_UNDOING = frozenset({SagaStatus.COMPENSATING, SagaStatus.ROLLBACK_FAILED})
#: Step states an undo's moves start from.
_UNDO_MOVES_FROM = frozenset(
    {
        StepState.COMPLETED,
        StepState.AWAITING_APPROVAL,
        StepState.COMPENSATING,
        StepState.ROLLBACK_FAILED,
        StepState.IN_DOUBT,
    }
)
#: A step's identity: what it did, to what, and how it is undone. Never changes.
IDENTITY = (
    "tool_name",
    "input",
    "idempotency_key",
    "reversibility",
    "has_undo",
    "requires_approval",
    "position",
    "created_at",
)
_IDENTITY_OF = operator.attrgetter(*IDENTITY)
#: What only a step's move may change (an attempt event changes none of it).
MOVABLE = (
    "state",
    "output",
    "error",
    "error_type",
    "traceback",
    "updated_at",
    "completed_at",
    "decision_note",
    "decided_by",
    "metadata",
)


def is_unsettled(state: str, has_undo: bool, saga_status: str) -> bool:
    """True while a step leaves something for a person (the engine's rollback outcome).

    A COMPLETED step with an undo counts while its saga is rolling back, or
    stopped rolling back: its undo has not run yet.
    """
    if state in OPEN_STATES:
        return True
    return state == StepState.COMPLETED and has_undo and saga_status in _UNDOING


def _refuse(rule: str, field: str, message: str) -> ChangeRefused:
    return ChangeRefused(rule, field, message)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON: ``==`` alone takes ``True`` for ``1`` and ``1`` for ``1.0``."""
    if a is b:
        return True
    if a != b or type(a) is not type(b):
        return False
    return not isinstance(a, (dict, list, tuple)) or _same_types(a, b)


def _same_types(a: Any, b: Any) -> bool:
    """Of two equal containers: every value has the same type as its counterpart."""
    if type(a) is dict:
        pairs = zip(a.values(), (b[k] for k in a), strict=True)
    else:
        pairs = zip(a, b, strict=True)  # equal sequences: equal lengths
    for x, y in pairs:
        if type(x) is not type(y):
            return False
        if type(x) in _CONTAINERS and not _same_types(x, y):
            return False
    return True


_CONTAINERS = {dict, list, tuple}


def check_change(
    saga: SagaRecord | None,
    step: StepSnapshot | None,
    change: SagaChange,
    *,
    steps: Collection[StepView] = (),
    max_steps: int | None = None,
) -> None:
    """Raise :class:`ChangeRefused` (or, for a move the tables forbid, its parent
    :class:`TransitionError`) unless ``change`` is legal.

    ``saga`` and ``step`` are what is stored now (``None``: not yet), ``change``
    what would be stored; ``steps`` are the saga's stored steps (their number
    places a new step; their states decide how a rollback may end), ``max_steps``
    the most a saga may have. Pure: it reads its arguments and nothing else.
    """
    record, snap, event = change
    _check_record(saga, record, event)
    kind = event.kind
    if kind == EventKind.SAGA:
        _saga_event(saga, record, snap, event, steps)
    elif kind == EventKind.STEP:
        assert saga is not None  # a first event is a saga event (_check_record)
        _step_event(saga, step, snap, event, steps, max_steps)
    elif kind == EventKind.ATTEMPT:
        assert saga is not None
        _attempt_event(saga, step, snap, event)
    elif kind == EventKind.CHECKPOINT:
        assert saga is not None
        _checkpoint_event(saga, record, snap, event)
    else:
        raise _refuse("validation_error", "event.kind", f"unknown event kind {kind!r}")
    # The event must describe the change it comes with (the log shows its names).
    if snap is None:
        if event.saga_id is record.id and event.step_id is None and event.tool_name is None:
            return  # the engine's own saga events carry the very same objects
    elif (
        event.saga_id is record.id
        and event.step_id is snap.id
        and event.tool_name is snap.tool_name
    ):
        return  # the engine's own step events carry the very same objects
    _check_event(record, snap, event)


def _check_record(saga: SagaRecord | None, record: SagaRecord, event: SagaEvent) -> None:
    """The saga's record as the change would store it: its seq, its birth, its fields' moves.

    The engine's own changes pass on identity checks alone (its hot path); anything else
    goes through the rules field by field, which name the field they refuse.
    """
    if event.seq != record.seq:
        raise _refuse("validation_error", "event.seq", "event.seq must equal saga.seq")
    if saga is None:
        if event.kind != EventKind.SAGA or event.from_state is not None:
            raise _refuse(
                "unknown_saga", "saga.id", f"saga {record.id!r} is unknown: its first event must "
                "create it",
            )  # fmt: skip
    elif not (
        # The engine's own moves: the same name, birth and options objects, a later seq,
        # the same status (unless a saga event), next step and failed step, or later ones.
        record.seq > saga.seq
        and record.name is saga.name
        and record.created_at is saga.created_at
        and record.options is saga.options
        and record.next_step_number >= saga.next_step_number
        and (saga.failed_step is None or record.failed_step is saga.failed_step)
        and (record.status is saga.status or event.kind == EventKind.SAGA)
        and not (event.kind == EventKind.SAGA and event.from_state is None)
    ):
        _check_saga_fields(saga, record, event)  # the same rules, field by field, with names


def _check_event(record: SagaRecord, snap: StepSnapshot | None, event: SagaEvent) -> None:
    """The event must describe the change it comes with (the log shows its names)."""
    if event.saga_id != record.id:
        raise _refuse("validation_error", "saga.id", "the event names another saga")
    step_id = None if snap is None else snap.id
    if event.step_id != step_id:
        raise _refuse(
            "validation_error", "event.step_id", f"event.step_id must be {step_id!r}, the step "
            "this event carries",
        )  # fmt: skip
    tool = None if snap is None else snap.tool_name
    if event.tool_name != tool:
        raise _refuse(
            "validation_error", "event.tool_name", f"event.tool_name must be {tool!r}, the tool "
            "of the step this event carries",
        )  # fmt: skip


def _check_saga_fields(saga: SagaRecord, record: SagaRecord, event: SagaEvent) -> None:
    """What every change to a stored saga keeps: order, name, birth, options, failed step."""
    if record.seq <= saga.seq:
        raise _refuse(
            "stale_event", "event.seq", f"saga {saga.id!r} is at event {saga.seq}; event "
            f"{record.seq} is older",
        )  # fmt: skip
    if event.kind == EventKind.SAGA and event.from_state is None:
        raise _refuse("conflict", "saga.id", f"saga {saga.id!r} already exists")
    if (
        record.name != saga.name
        or record.created_at != saga.created_at
        or not _same(record.options, saga.options)
    ):
        fixed = ("name", "created_at", "options")
        name = next(n for n in fixed if not _same(getattr(record, n), getattr(saga, n)))
        raise _refuse("fixed_field", f"saga.{name}", f"saga {saga.id!r}: its {name} never changes")
    if record.next_step_number < saga.next_step_number:
        raise _refuse(
            "fixed_field", "saga.next_step_number", f"saga {saga.id!r}: next_step_number "
            f"never goes back (it is {saga.next_step_number})",
        )  # fmt: skip
    if saga.failed_step is not None and record.failed_step != saga.failed_step:
        raise _refuse(
            "fixed_field", "saga.failed_step", f"saga {saga.id!r}: failed_step is "
            f"{saga.failed_step!r} for good",
        )  # fmt: skip
    if event.kind != EventKind.SAGA and record.status != saga.status:
        raise _refuse(
            "illegal_transition", "saga.status", f"saga {saga.id!r} is {saga.status}: only a "
            f"saga event changes its status, not a {event.kind} event",
        )  # fmt: skip


def _saga_event(
    saga: SagaRecord | None,
    record: SagaRecord,
    snap: StepSnapshot | None,
    event: SagaEvent,
    steps: Collection[StepView],
) -> None:
    if snap is not None:
        raise _refuse("validation_error", "step", "a saga event carries no step")
    if event.to_state != record.status:
        raise _refuse("validation_error", "event.to_state", "event.to_state must equal saga.status")
    if saga is None:
        if record.status != SagaStatus.IN_PROGRESS:
            raise _refuse("illegal_transition", "saga.status", "a new saga starts IN_PROGRESS")
        if record.failed_step is not None:
            raise _refuse("illegal_transition", "saga.failed_step", "a new saga has no failed step")
        return
    if event.from_state != saga.status:
        raise _refuse(
            "illegal_transition", "event.from_state", f"saga {saga.id!r} is {saga.status}, "
            f"not {event.from_state}",
        )  # fmt: skip
    check_saga_transition(saga.status, record.status, saga_id=saga.id)
    to = record.status
    if to in (SagaStatus.COMPLETED, SagaStatus.COMPENSATING):
        if any(s.state == StepState.PENDING for s in steps):
            raise _refuse(
                "illegal_transition", "event.to_state", f"saga {saga.id!r} cannot become {to} "
                "while a step is PENDING (complete or fail it first)",
            )  # fmt: skip
    elif to in (SagaStatus.ROLLED_BACK, SagaStatus.ROLLBACK_FAILED):
        left = any(is_unsettled(s.state, s.has_undo, saga.status) for s in steps)
        if to == SagaStatus.ROLLED_BACK and left:
            raise _refuse(
                "illegal_transition", "event.to_state", f"saga {saga.id!r} cannot be "
                "ROLLED_BACK while an undo is waiting, failed, in doubt or not yet run",
            )  # fmt: skip
        if to == SagaStatus.ROLLBACK_FAILED and not left:
            raise _refuse(
                "illegal_transition", "event.to_state", f"saga {saga.id!r} cannot be "
                "ROLLBACK_FAILED: no undo is left for a person",
            )  # fmt: skip


def _carried_step(snap: StepSnapshot | None, event: SagaEvent, missing: str) -> StepSnapshot:
    """The step an event carries, in the state the event says it moves to."""
    if snap is None:
        raise _refuse("validation_error", "step", missing)
    if event.to_state != snap.state:
        raise _refuse("validation_error", "event.to_state", "event.to_state must equal step.state")
    return snap


def _moved_step(step: StepSnapshot | None, snap: StepSnapshot, event: SagaEvent) -> StepSnapshot:
    """The stored step an event moves, which must be in the state the event moves it from."""
    if step is None:
        raise _refuse("unknown_step", "step.id", f"step {snap.id!r} is unknown")
    if event.from_state != step.state:
        raise _refuse(
            "illegal_transition", "event.from_state", f"step {snap.id!r} is {step.state}, "
            f"not {event.from_state}",
        )  # fmt: skip
    return step


def _step_event(
    saga: SagaRecord,
    step: StepSnapshot | None,
    snap: StepSnapshot | None,
    event: SagaEvent,
    steps: Collection[StepView],
    max_steps: int | None,
) -> None:
    if snap is None or event.to_state != snap.state:
        snap = _carried_step(snap, event, "a step event needs its step")
    if event.from_state is None:
        _new_step(saga, step, snap, steps, max_steps)
        return
    if step is None or event.from_state != step.state:
        step = _moved_step(step, snap, event)
    if snap.state not in STEP_TRANSITIONS[step.state]:  # the table (its error, its words)
        check_step_transition(step.state, snap.state, step_id=snap.id)
    if step.state == StepState.PENDING:
        allowed = (
            (SagaStatus.IN_PROGRESS,)
            if snap.state == StepState.COMPLETED
            else (SagaStatus.IN_PROGRESS, SagaStatus.FAILED)
        )
        if saga.status not in allowed:
            raise _refuse(
                "illegal_transition", "saga.status", f"saga {saga.id!r} is {saga.status}: "
                f"its step {snap.id!r} cannot become {snap.state} now",
            )  # fmt: skip
    elif step.state in _UNDO_MOVES_FROM and saga.status not in _UNDOING:
        raise _refuse(
            "illegal_transition", "saga.status", f"saga {saga.id!r} is {saga.status}: an undo "
            "runs only while it is COMPENSATING or ROLLBACK_FAILED",
        )  # fmt: skip
    _check_identity(step, snap)
    if snap.compensation_attempts is not step.compensation_attempts:
        _check_attempts(step, snap, appending=step.state == StepState.COMPENSATING)


def _new_step(
    saga: SagaRecord,
    step: StepSnapshot | None,
    snap: StepSnapshot,
    steps: Collection[StepView],
    max_steps: int | None,
) -> None:
    if step is not None:
        raise _refuse("conflict", "step.id", f"step {snap.id!r} already exists")
    if snap.state != StepState.PENDING:
        raise _refuse("illegal_transition", "step.state", "a new step starts PENDING")
    if saga.status != SagaStatus.IN_PROGRESS:
        raise _refuse(
            "illegal_transition", "saga.status", f"saga {saga.id!r} is {saga.status}: it has "
            "ended, so it takes no new step",
        )  # fmt: skip
    count = len(steps)
    if max_steps is not None and count >= max_steps:
        raise _refuse("limit_exceeded", "step.id", f"a saga has at most {max_steps} steps")
    if snap.position != count:
        raise _refuse(
            "illegal_transition", "step.position", f"step {snap.id!r} must be at position "
            f"{count}, after the saga's {count} steps",
        )  # fmt: skip
    if snap.compensation_attempts:
        raise _refuse("illegal_transition", "step.attempts", "a new step has no undo attempts")


def _check_identity(step: StepSnapshot, snap: StepSnapshot) -> None:
    # One tuple comparison first (the engine's own moves carry the very same objects);
    # the field at fault, and JSON exactness (``1`` is not ``true``), only past it.
    if _IDENTITY_OF(snap) != _IDENTITY_OF(step) or (
        snap.input is not step.input and not _same(snap.input, step.input)
    ):
        name = next(n for n in IDENTITY if not _same(getattr(snap, n), getattr(step, n)))
        raise _refuse("fixed_field", f"step.{name}", f"step {snap.id!r}: its {name} never changes")
    if step.state != StepState.PENDING and (
        snap.completed_at != step.completed_at
        or (snap.output is not step.output and not _same(snap.output, step.output))
    ):
        name = "completed_at" if snap.completed_at != step.completed_at else "output"
        raise _refuse(
            "fixed_field", f"step.{name}", f"step {snap.id!r}: its {name} is fixed once it "
            "left PENDING",
        )  # fmt: skip


def _check_attempts(step: StepSnapshot, snap: StepSnapshot, *, appending: bool) -> None:
    """Recorded attempts stay as they are; new ones only while an undo runs, numbered up."""
    old, new = step.compensation_attempts, snap.compensation_attempts
    if new is old:
        return
    if len(new) < len(old) or tuple(new[: len(old)]) != tuple(old):
        raise _refuse(
            "fixed_field", "step.attempts", f"step {snap.id!r}: recorded undo attempts are "
            "never changed or removed",
        )  # fmt: skip
    if len(new) == len(old):
        return
    if not appending:
        raise _refuse(
            "illegal_transition", "step.attempts", f"step {snap.id!r} is {step.state}: undo "
            "attempts are recorded only while it is COMPENSATING",
        )  # fmt: skip
    last = old[-1].number if old else 0
    for attempt in new[len(old) :]:
        if attempt.number <= last:
            raise _refuse(
                "illegal_transition", "step.attempts", f"step {snap.id!r}: attempt "
                f"{attempt.number} must be numbered after {last}",
            )  # fmt: skip
        last = attempt.number


def _attempt_event(
    saga: SagaRecord, step: StepSnapshot | None, snap: StepSnapshot | None, event: SagaEvent
) -> None:
    snap = _carried_step(snap, event, "an attempt event needs its step")
    step = _moved_step(step, snap, event)
    if step.state != StepState.COMPENSATING or saga.status not in _UNDOING:
        raise _refuse(
            "illegal_transition", "step.state", f"step {snap.id!r} is {step.state} in a "
            f"{saga.status} saga: an undo attempt is recorded only while its undo runs",
        )  # fmt: skip
    _check_identity(step, snap)
    for name in MOVABLE:
        if not _same(getattr(snap, name), getattr(step, name)):
            raise _refuse(
                "fixed_field", f"step.{name}", f"an attempt event only adds undo attempts; it "
                f"cannot change step {snap.id!r}'s {name}",
            )  # fmt: skip
    if len(snap.compensation_attempts) <= len(step.compensation_attempts):
        raise _refuse("validation_error", "step.attempts", "an attempt event adds an attempt")
    _check_attempts(step, snap, appending=True)


def _checkpoint_event(
    saga: SagaRecord, record: SagaRecord, snap: StepSnapshot | None, event: SagaEvent
) -> None:
    if snap is not None:
        raise _refuse("validation_error", "step", "a checkpoint carries no step")
    if event.to_state != record.status:
        raise _refuse("validation_error", "event.to_state", "event.to_state must equal saga.status")
    if SagaStatus(saga.status).ended:
        raise _refuse(
            "illegal_transition", "saga.status", f"saga {saga.id!r} is {saga.status}: an ended "
            "saga saves no checkpoint",
        )  # fmt: skip
    for name in ("next_step_number", "failed_step"):
        if getattr(record, name) != getattr(saga, name):
            raise _refuse(
                "fixed_field", f"saga.{name}", f"a checkpoint saves the saga's state only, "
                f"not its {name}",
            )  # fmt: skip


def replay(changes: Iterable[SagaChange], *, max_steps: int | None = None) -> SagaSnapshot | None:
    """Fold a saga's changes, oldest first, through :func:`check_change`.

    Returns the saga and its steps (by position) as a store that accepted exactly
    these changes holds them, or ``None`` for no change; raises the first refusal
    (:class:`TransitionError`), so a log that was rewritten does not replay.
    """
    saga: SagaRecord | None = None
    steps: dict[str, StepSnapshot] = {}
    for change in changes:
        snap = change.step
        stored = None if snap is None else steps.get(snap.id)
        check_change(saga, stored, change, steps=steps.values(), max_steps=max_steps)
        saga = change.saga
        if snap is not None:
            steps[snap.id] = snap
    if saga is None:
        return None
    return SagaSnapshot(record=saga, steps=tuple(sorted(steps.values(), key=lambda s: s.position)))

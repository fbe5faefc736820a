"""A server-run transition is one short transaction: the saga row, the step row, the event.

``DjangoStore`` knows the saga it wrote (or loaded) last, so the next transition reads
nothing: BEGIN, the saga row's guarded UPDATE (which takes its lock), the step row's
UPDATE or INSERT, the event's INSERT, COMMIT. A step whose undo just ended adds its
attempt's row. ``benchmarks.engine`` measures the time; this pins the counts (BEGIN and
COMMIT included, as ``connection.queries`` lists them), on a transactional database so
commits are real. A count is an upper bound: fewer is fine (lower it), more fails.

When the saga row is not as the store knows it (another writer, an operator who left a
failed undo, an outer transaction rolled back), the write reads it under lock again, and
what is stored is what the locked path would store.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sagaboard.engine.reads import rollback_outcomes
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.models import Event, Project, Saga, Step
from undo_core import LeaseError, SagaChange, SagaRollbackError, define_tool
from undo_core import Saga as EngineSaga

pytestmark = pytest.mark.django_db(transaction=True)

TRANSITION = 5
"""BEGIN, the saga row, the step row, the event row, COMMIT."""
WITH_ATTEMPT = 6
"""The same, and the row of the undo attempt that just ended (a row of its own)."""


class CountingStore(DjangoStore):
    """A DjangoStore that keeps the statements of each transition, by what it moved."""

    def __init__(self, project: Project) -> None:
        super().__init__(project)
        self.counts: dict[str, list[int]] = defaultdict(list)
        self.before: Any = None

    def apply(self, change: SagaChange) -> None:
        if self.before is not None:
            self.before(change)
        with CaptureQueriesContext(connection) as ctx:
            super().apply(change)
        e = change.event
        what = f"{'step' if e.step_id else 'saga'} {e.from_state or 'new'}->{e.to_state}"
        self.counts[what].append(len(ctx.captured_queries))


def _undone(out: Any, x: Any) -> None:
    return None


def _undo_fails(out: Any, x: Any) -> None:
    raise ConnectionError("refund API down")


def _fails(x: Any) -> Any:
    raise ValueError("label printer on fire")


TOOL = define_tool("book", lambda x: {"booked": x}, _undone)
FRAGILE = define_tool("refund", lambda x: {"refund": x}, _undo_fails)
BROKEN = define_tool("label", _fails)


@pytest.fixture
def project() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def test_each_kind_of_transition_is_one_transaction_of_few_statements(project: Project) -> None:
    store = CountingStore(project)
    saga = EngineSaga("trip", store=store)
    saga.execute(TOOL, 1)  # step started (PENDING), step completed
    saga.execute(TOOL, 2)
    saga.rollback()  # saga compensating, each step compensating then rolled back, saga rolled back
    done = EngineSaga("order", store=store)
    done.execute(TOOL, 3)
    done.complete()  # saga completed
    counts = dict(store.counts)
    print(counts)
    assert set(counts) >= {
        "saga new->IN_PROGRESS",
        "step new->PENDING",
        "step PENDING->COMPLETED",
        "saga IN_PROGRESS->COMPENSATING",
        "step COMPLETED->COMPENSATING",
        "step COMPENSATING->ROLLED_BACK",
        "saga COMPENSATING->ROLLED_BACK",
        "saga IN_PROGRESS->COMPLETED",
    }, counts
    for what, seen in counts.items():
        most = WITH_ATTEMPT if what == "step COMPENSATING->ROLLED_BACK" else TRANSITION
        assert max(seen) <= most, (what, seen)


def test_a_failed_undo_and_a_failed_step_are_few_statements_too(project: Project) -> None:
    store = CountingStore(project)
    saga = EngineSaga("refund", store=store, on_compensation_failure="continue")
    saga.execute(TOOL, 1)
    saga.execute(FRAGILE, 2)
    with pytest.raises(SagaRollbackError):
        saga.execute(BROKEN, 3)  # step failed, then the rollback: one undo fails, one works
    counts = dict(store.counts)
    print(counts)
    assert "step COMPENSATING->ROLLBACK_FAILED" in counts, counts
    for what, seen in counts.items():
        # An undo that ended (failed or not) adds its attempt's row; a failed one also
        # writes the outbox row of its notification when notifications are on (off here).
        most = WITH_ATTEMPT if what.startswith("step COMPENSATING->") else TRANSITION
        assert max(seen) <= most, (what, seen)
    stored = Saga.objects.get(saga_id=saga.id)
    assert (stored.outcome, stored.outcome_summary) == _assessed(stored)


def test_a_restored_saga_writes_its_first_transition_without_reading(project: Project) -> None:
    first = EngineSaga("trip", store=DjangoStore(project), saga_id="trip-1")
    first.execute(TOOL, 1)
    first.release()
    store = CountingStore(project)
    saga = EngineSaga.restore(store, "trip-1", {"book": TOOL}, owner="op")
    saga.rollback()
    assert max(store.counts["saga IN_PROGRESS->COMPENSATING"]) <= TRANSITION
    assert max(store.counts["step COMPLETED->COMPENSATING"]) <= TRANSITION


def test_a_saga_changed_behind_the_store_is_read_again_under_lock(project: Project) -> None:
    store = CountingStore(project)
    saga = EngineSaga("trip", store=store, saga_id="trip-1")
    saga.execute(TOOL, 1)
    # Someone else's write moves changed_at (as every write does) without the store knowing.
    Saga.objects.filter(saga_id="trip-1").update(changed_at=timezone.now(), owner_since=None)
    saga.execute(TOOL, 2)
    assert max(store.counts["step new->PENDING"]) > TRANSITION  # read again: the locked path
    stored = Saga.objects.get(saga_id="trip-1")
    assert stored.seq == saga.record.seq
    assert list(Step.objects.filter(saga=stored).values_list("state", flat=True)) == [
        "COMPLETED",
        "COMPLETED",
    ]


def test_a_stale_writer_is_still_refused_when_its_store_knows_the_saga(project: Project) -> None:
    mine = DjangoStore(project)
    saga = EngineSaga("trip", store=mine, saga_id="trip-1", owner="me")
    saga.execute(TOOL, 1)
    # Another process takes the saga over (its lease expired) and writes a transition.
    Saga.objects.filter(saga_id="trip-1").update(lease_owner="them", lease_expires_at=None)
    with pytest.raises(LeaseError):
        mine.apply_change(_next(saga, mine))
    Saga.objects.filter(saga_id="trip-1").update(lease_owner=None)
    change = _next(saga, mine)
    DjangoStore(project).apply_change(change)  # seq + 1, written by someone else
    with pytest.raises(LeaseError, match="stale"):
        mine.apply_change(change)  # the same seq again, from a store that knew the saga


def test_a_failed_undo_left_by_an_operator_meanwhile_counts_as_left(project: Project) -> None:
    """The store assesses a rolling saga's outcome from the steps it knows; a step an
    operator leaves failed between two writes is not one it knows, so that write reads
    the steps again, and the outcome is the one undo_core assesses from the stored rows."""
    store = CountingStore(project)
    saga = EngineSaga("refund", store=store, on_compensation_failure="continue")
    saga.execute(TOOL, 1)
    refund = saga.execute(FRAGILE, 2)
    saga.execute(TOOL, 3)

    def operator_leaves_refund(change: SagaChange) -> None:
        e = change.event
        if e.step_id == "step-1" and e.to_state == "COMPENSATING":  # after the refund failed
            Step.objects.filter(saga__saga_id=saga.id, step_id="step-2").update(
                left_at=timezone.now(), left_by="ann", left_reason="refunded by hand"
            )

    store.before = operator_leaves_refund
    saga.rollback()
    assert refund is not None
    stored = Saga.objects.get(saga_id=saga.id)
    assert stored.status == "ROLLBACK_FAILED"  # a failed undo (left or not) is never clean
    assert (stored.outcome, stored.outcome_summary) == _assessed(stored)
    assert "left" in stored.outcome_summary, stored.outcome_summary
    assert max(store.counts["step COMPLETED->COMPENSATING"]) > TRANSITION  # read again


def test_a_write_rolled_back_by_its_callers_transaction_is_not_trusted(project: Project) -> None:
    from django.db import transaction

    store = DjangoStore(project)
    saga = EngineSaga("trip", store=store, saga_id="trip-1")
    saga.execute(TOOL, 1)
    change = _next(saga, store)
    with pytest.raises(RuntimeError), transaction.atomic():
        store.apply_change(change)
        raise RuntimeError("the caller's request failed after the write")
    # The store wrote seq N and saw its write succeed; the row is back at N - 1, and
    # another writer now writes N: the store must not take the row for its own.
    DjangoStore(project).apply_change(change)
    with CaptureQueriesContext(connection) as ctx:
        store.apply_change(_next(saga, store))
    assert len(ctx.captured_queries) > TRANSITION  # read again under lock
    assert Event.objects.filter(saga__saga_id="trip-1", seq=change.saga.seq).count() == 1
    assert store_seq("trip-1") == change.saga.seq + 1


def _next(saga: EngineSaga, store: DjangoStore) -> SagaChange:
    """The saga's next change as its engine would write it: its record, one seq on."""
    from undo_core import EventKind, SagaEvent

    record = saga.record._replace(seq=store_seq(saga.id) + 1, updated_at=timezone.now())
    event = SagaEvent(
        saga_id=saga.id, saga_name=record.name, seq=record.seq, kind=EventKind.SAGA,
        to_state=record.status.value, from_state=record.status.value, at=record.updated_at,
    )  # fmt: skip
    return SagaChange(saga=record, step=None, event=event)


def store_seq(saga_id: str) -> int:
    return int(Saga.objects.get(saga_id=saga_id).seq)


def _assessed(saga: Saga) -> tuple[str | None, str]:
    found = rollback_outcomes.assess(saga)
    fields = rollback_outcomes.fields(found)
    return fields["outcome"], fields["outcome_summary"]

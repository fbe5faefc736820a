"""The server's clock stepped forward and back, through the project's clock seams.

``django.utils.timezone.now`` is the wall clock every stored time comes from; the
sweep's "unchanged for how long" runs on ``sagaboard.infra.observed_time.monotonic``;
rate-limit windows on ``sagaboard.infra.http.rate_limits._now``. Each test steps the wall clock
an hour (a VM resumed, NTP stepping, ``date -s``) and moves the monotonic clock only as
much as real time passes, as the kernel does.

What must hold: a lease a live worker renews never looks orphaned however far the wall
clock jumps (no undo runs twice); a dead holder's work is still picked up, by elapsed
time, whichever way it jumped; an approval's deadline follows the wall clock (it is shown
as a time) and expires once; a rate limit never locks anyone out for longer than its
window, and lets at most one window's worth extra through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from sagaboard.actions.services import runner
from sagaboard.approvals.services import approvals
from sagaboard.infra import observed_time
from sagaboard.infra.http import rate_limits
from sagaboard.models import Approval, ApprovalPolicy, AuditEntry, Project, Saga, Step
from undo_core import SagaStatus, StepState, default_owner

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
LEASE = timedelta(seconds=settings.SAGABOARD_WORKER_LEASE_SECONDS)
WATCH = max(30.0, LEASE.total_seconds())  # what orphaned_work waits by the monotonic clock


class Clocks:
    """The wall clock (stepped at will) and the monotonic one (moved by ``elapse``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real = timezone.now
        self.offset = timedelta(0)
        self.mono = 1000.0
        monkeypatch.setattr(timezone, "now", lambda: self.real() + self.offset)
        monkeypatch.setattr(observed_time, "monotonic", lambda: self.mono)

    def now(self) -> datetime:
        return timezone.now()

    def step(self, by: timedelta) -> None:
        """The wall clock set forward (or back): nothing else moves."""
        self.offset += by

    def elapse(self, seconds: float) -> None:
        """Real time passes: both clocks move."""
        self.offset += timedelta(seconds=seconds)
        self.mono += seconds


@pytest.fixture
def clocks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clocks]:
    yield Clocks(monkeypatch)


@pytest.fixture
def compensating(clocks: Clocks) -> Callable[..., Saga]:
    project = Project.objects.create(slug="jump", name="Jump")

    def make(saga_id: str, owner: str | None, changed: datetime) -> Saga:
        now = clocks.now()
        saga = Saga.objects.create(
            project=project, saga_id=saga_id, name="refund", status=SagaStatus.COMPENSATING,
            driver=Saga.Driver.SERVER, created_at=now, updated_at=now, seq=4,
            lease_owner=owner, lease_expires_at=now + LEASE if owner else None,
        )  # fmt: skip
        Saga.objects.filter(pk=saga.pk).update(changed_at=changed)
        return saga

    return make


def listed(saga: Saga) -> bool:
    return ("saga", saga.pk) in runner.orphaned_work()


def renew(saga: Saga, clocks: Clocks) -> None:
    """What a live worker's lease keeper does every third of the lease."""
    Saga.objects.filter(pk=saga.pk).update(lease_expires_at=clocks.now() + LEASE)


ALIVE = f"{default_owner()}:worker"  # this process: alive
ELSEWHERE = "worker-host-2:4242:abc:worker"  # another host: only its lease tells


# ---------------------------------------------------------------- leases


def test_a_forward_jump_never_makes_a_renewing_workers_saga_look_orphaned(
    clocks: Clocks, compensating: Callable[..., Saga]
) -> None:
    saga = compensating("held", ELSEWHERE, clocks.now() - timedelta(minutes=5))
    clocks.step(HOUR)  # every lease now looks an hour lapsed
    for _ in range(int(3 * WATCH / (LEASE.total_seconds() / 3)) + 1):
        assert not listed(saga)
        clocks.elapse(LEASE.total_seconds() / 3)
        renew(saga, clocks)
    assert not listed(saga)


def test_after_a_forward_jump_a_silent_holders_saga_is_picked_up_by_elapsed_time(
    clocks: Clocks, compensating: Callable[..., Saga]
) -> None:
    saga = compensating("dead-elsewhere", ELSEWHERE, clocks.now() - timedelta(minutes=5))
    clocks.step(HOUR)
    assert not listed(saga)  # first sight: lapsed by the wall clock only
    clocks.elapse(WATCH - 1)
    assert not listed(saga)
    clocks.elapse(1)
    assert listed(saga)


def test_a_lease_set_before_a_backward_jump_is_cut_to_one_lease_and_then_lapses(
    clocks: Clocks, compensating: Callable[..., Saga]
) -> None:
    saga = compensating("dead-before-jump", ELSEWHERE, clocks.now())
    clocks.step(-HOUR)  # the lease now looks valid for an hour and a lease more
    assert not listed(saga)
    saga.refresh_from_db()
    assert saga.lease_expires_at is not None
    assert saga.lease_expires_at <= clocks.now() + LEASE  # cut to one lease from now
    clocks.elapse(LEASE.total_seconds() + 1)
    assert not listed(saga)  # lapsed now, and first seen so
    clocks.elapse(WATCH)
    assert listed(saga)


def test_a_live_workers_lease_is_not_cut_by_a_backward_jump_it_renews(
    clocks: Clocks, compensating: Callable[..., Saga]
) -> None:
    saga = compensating("live", ALIVE, clocks.now())
    clocks.step(-HOUR)
    for _ in range(12):
        assert not listed(saga)
        clocks.elapse(LEASE.total_seconds() / 3)
        renew(saga, clocks)
    assert not listed(saga)


def test_after_a_backward_jump_a_free_saga_changed_in_the_future_is_still_picked_up(
    clocks: Clocks, compensating: Callable[..., Saga]
) -> None:
    saga = compensating("lost-task", None, clocks.now())
    clocks.step(-HOUR)  # its last change now lies an hour ahead: never "30 s ago" by the wall
    assert not listed(saga)
    clocks.elapse(WATCH)
    assert listed(saga)


def test_a_dead_local_holder_is_picked_up_at_once_whatever_the_clock_says(
    clocks: Clocks, compensating: Callable[..., Saga]
) -> None:
    dead = f"{default_owner().split(':')[0]}:999999999:x:worker"  # no such pid here
    saga = compensating("dead-here", dead, clocks.now())
    for jump in (HOUR, -2 * HOUR):
        clocks.step(jump)
        assert listed(saga)


# ---------------------------------------------------------------- approval deadlines


def _pending_approval(clocks: Clocks, timeout: int) -> Approval:
    project = Project.objects.create(slug=f"deadline-{timeout}", name="Deadline")
    now = clocks.now()
    saga = Saga.objects.create(
        project=project, saga_id="waits", name="refund", status=SagaStatus.COMPENSATING,
        driver=Saga.Driver.CLIENT, created_at=now, updated_at=now,
    )  # fmt: skip
    step = Step.objects.create(
        saga=saga, step_id="step-1", position=1, tool_name="refund_payment",
        state=StepState.COMPLETED, idempotency_key="k-1",
    )  # fmt: skip
    return Approval.objects.create(
        project=project, saga=saga, step=step, status=Approval.Status.PENDING,
        why="refunds need a person", plan_hash="0" * 64,
        expires_at=now + timedelta(seconds=timeout),
        policy_snapshot={"name": "refunds", "timeout_seconds": timeout,
                         "on_expiry": ApprovalPolicy.OnExpiry.REJECT},
    )  # fmt: skip


def test_an_approval_deadline_follows_the_wall_clock_and_expires_once(clocks: Clocks) -> None:
    approval = _pending_approval(clocks, timeout=600)
    clocks.step(-HOUR)
    assert approvals.approvals_expire() == 0  # its deadline is further off, not passed
    clocks.step(2 * HOUR)  # now 50 minutes past the deadline it shows
    assert approvals.approvals_expire() == 1
    clocks.step(-HOUR)  # and back before it: what expired stays expired, once
    clocks.step(2 * HOUR)
    assert approvals.approvals_expire() == 0
    approval.refresh_from_db()
    assert approval.status == Approval.Status.EXPIRED
    assert AuditEntry.objects.filter(action="approval.expired").count() == 1


# ---------------------------------------------------------------- rate limits


@pytest.mark.parametrize("jump", [HOUR, -HOUR, timedelta(seconds=-30)])
def test_a_rate_limit_never_locks_out_longer_than_its_window_across_a_jump(
    jump: timedelta, monkeypatch: pytest.MonkeyPatch
) -> None:
    rate = rate_limits.Rate(count=5, seconds=60)
    wall = [1_800_000_010.0]  # 10 s into a window
    monkeypatch.setattr(rate_limits, "_now", lambda: wall[0])
    for _ in range(5):
        rate_limits.hit("login", "ann", rate)
    assert 1 <= rate_limits.wait_seconds("login", "ann", rate) <= 60
    wall[0] += jump.total_seconds()
    waited = rate_limits.wait_seconds("login", "ann", rate)
    assert 0 <= waited <= 60, waited  # never negative, never more than a window
    allowed = 0
    while rate_limits.wait_seconds("login", "ann", rate) == 0 and allowed < 20:
        rate_limits.hit("login", "ann", rate)
        allowed += 1
    assert allowed <= rate.count  # a jump gives at most one more window's allowance

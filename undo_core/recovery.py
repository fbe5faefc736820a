"""Crash recovery: finish what a dead process left half done.

A saga's lease names its owner as ``host:pid:nonce`` and expires unless the
owner keeps writing. A saga is taken over when its lease has expired, or when
its owner is a process on this host that no longer exists. Taking over is a
compare-and-set on the store, so two recovering processes never both act on
one saga.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from .clock import Clock, SystemClock
from .effects import Flow
from .engine import SagaCore, default_owner
from .errors import LeaseError, SagaNotFoundError
from .records import AttemptOutcome, CompensationAttempt, SagaRecord
from .reports import RollbackReport
from .saga import AsyncSaga, Saga
from .states import SagaStatus, StepState
from .storage import SagaStore
from .tools import Tool

__all__ = ["RecoveryResult", "arecover", "attach", "owner_is_gone", "recover"]

S = TypeVar("S", bound=SagaCore)


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What recovery did with one saga."""

    saga_id: str
    saga_name: str
    status: SagaStatus
    report: RollbackReport
    in_doubt: tuple[str, ...]
    """Steps that were running when their process died: a human must judge them."""


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


def _tool_map(tools: Mapping[str, Tool] | Iterable[Tool]) -> dict[str, Tool]:
    if isinstance(tools, Mapping):
        return {t.name: t for t in tools.values()} | dict(tools)
    return {t.name: t for t in tools}


def attach[S: SagaCore](
    saga_class: type[S],
    store: SagaStore,
    saga_id: str,
    tools: Mapping[str, Tool] | Iterable[Tool],
    *,
    owner: str | None = None,
    lease_seconds: float = 300.0,
    clock: Clock | None = None,
    **options: Any,
) -> S:
    """Load a saga from ``store`` and take its lease, to act on it from this process.

    Raises :class:`SagaNotFoundError` for an unknown id and :class:`LeaseError`
    while another live process holds it.
    """
    snapshot = store.load(saga_id)
    if snapshot is None:
        raise SagaNotFoundError(f"no saga {saga_id!r} in the store")
    owner = owner or default_owner()
    now = (clock or SystemClock()).now()
    current = snapshot.record.lease_owner
    if current != owner and not owner_is_gone(snapshot.record, now):
        raise LeaseError(f"saga {saga_id!r} is held by live process {current!r}")
    if not store.acquire_lease(
        saga_id, owner, now + timedelta(seconds=lease_seconds), expected_owner=current
    ):
        raise LeaseError(f"saga {saga_id!r} was taken by another process first")
    saga: S = saga_class._restored(
        snapshot,
        _tool_map(tools),
        store=store,
        owner=owner,
        lease_seconds=lease_seconds,
        clock=clock,
        **options,
    )
    return saga


def _recovery_flow(saga: SagaCore) -> Flow[RollbackReport]:
    for step in saga._steps:
        if step.state is StepState.PENDING:
            saga._step_to(
                step,
                StepState.IN_DOUBT,
                detail="the process died while this step ran; its effect may have happened",
                error="in doubt: the process stopped while this step was running",
            )
        elif step.state is StepState.COMPENSATING:
            # The undo may or may not have run: record it, then run it again with
            # the same idempotency key (undos must tolerate a repeat).
            started = step.updated_at
            saga._attempt_event(
                step,
                CompensationAttempt(
                    len(step.attempts) + 1,
                    started,
                    saga._clock.now(),
                    AttemptOutcome.INTERRUPTED,
                    "the process died during this undo",
                ),
            )
    resume = saga.status is SagaStatus.COMPENSATING
    report = yield from saga._rollback_flow("recovery", resume=resume)
    return report


def _candidates(store: SagaStore, now: datetime) -> Iterable[str]:
    for saga_id in store.list_unfinished():
        snapshot = store.load(saga_id)
        if snapshot is None or snapshot.record.options.get("kind") == "declarative":
            continue  # declarative sagas are resumed by their definition, not rolled back
        if owner_is_gone(snapshot.record, now):
            yield saga_id


def _result(saga: SagaCore, report: RollbackReport) -> RecoveryResult:
    return RecoveryResult(saga.id, saga.name, saga.status, report, report.in_doubt)


def recover(
    store: SagaStore,
    tools: Mapping[str, Tool] | Iterable[Tool],
    *,
    owner: str | None = None,
    clock: Clock | None = None,
    **options: Any,
) -> list[RecoveryResult]:
    """Roll back every saga a dead process left unfinished, from where it stopped.

    ROLLED_BACK steps are never undone again; a step found PENDING becomes
    IN_DOUBT (surfaced, not assumed undone); a step whose tool is not in
    ``tools`` ends ROLLBACK_FAILED naming it. ``options`` go to each restored
    :class:`Saga` (``gate``, ``listeners``...).
    """
    owner = owner or default_owner()
    results = []
    for saga_id in _candidates(store, (clock or SystemClock()).now()):
        try:
            saga = attach(Saga, store, saga_id, tools, owner=owner, clock=clock, **options)
        except LeaseError:
            continue  # another process took it first
        try:
            if saga.status.ended:
                continue  # another process finished it since it was listed
            report = saga._drive(_recovery_flow(saga))
            results.append(_result(saga, report))
        finally:
            store.release_lease(saga_id, owner)
    return results


async def arecover(
    store: SagaStore,
    tools: Mapping[str, Tool] | Iterable[Tool],
    *,
    owner: str | None = None,
    clock: Clock | None = None,
    **options: Any,
) -> list[RecoveryResult]:
    """:func:`recover` for async tools (restores :class:`AsyncSaga`)."""
    owner = owner or default_owner()
    results = []
    for saga_id in _candidates(store, (clock or SystemClock()).now()):
        try:
            saga = attach(AsyncSaga, store, saga_id, tools, owner=owner, clock=clock, **options)
        except LeaseError:
            continue
        try:
            if saga.status.ended:
                continue
            report = await saga._drive(_recovery_flow(saga))
            results.append(_result(saga, report))
        finally:
            store.release_lease(saga_id, owner)
    return results

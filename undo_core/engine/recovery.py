"""Crash recovery: finish what a dead process left half done.

A saga's lease names its owner as ``host:pid:nonce`` and expires unless the
owner keeps writing. A saga is taken over when its lease has expired, or when
its owner is a process on this host that no longer exists. Taking over is a
compare-and-set on the store, so two recovering processes never both act on
one saga.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..stores.storage import SagaStore
from ..vocabulary.clock import Clock, SystemClock
from ..vocabulary.errors import LeaseError
from ..vocabulary.records import SagaKind
from ..vocabulary.states import SagaStatus
from ..vocabulary.tools import Tool
from .core import SagaCore
from .ledger import default_owner, local_owner_dead, owner_is_gone
from .reports import RollbackReport
from .saga import AsyncSaga, Saga

__all__ = [
    "RecoveryResult",
    "arecover",
    "attach",
    "local_owner_dead",
    "owner_is_gone",
    "recover",
]


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What recovery did with one saga."""

    saga_id: str
    saga_name: str
    status: SagaStatus
    report: RollbackReport
    in_doubt: tuple[str, ...]
    """Steps that were running when their process died: a human must judge them."""


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
    while another live process holds it (see :meth:`SagaCore.restore`).
    """
    return saga_class.restore(
        store, saga_id, tools, owner=owner, lease_seconds=lease_seconds, clock=clock, **options
    )


def _candidates(store: SagaStore, now: datetime) -> Iterable[str]:
    for saga_id in store.list_unfinished():
        snapshot = store.load(saga_id)
        if snapshot is None or snapshot.record.options.get("kind") == SagaKind.DECLARATIVE:
            continue  # declarative sagas are resumed by their definition, not rolled back
        if owner_is_gone(snapshot.record, now):
            yield saga_id


def _result(saga: SagaCore, report: RollbackReport) -> RecoveryResult:
    return RecoveryResult(
        saga_id=saga.id,
        saga_name=saga.name,
        status=saga.status,
        report=report,
        in_doubt=report.in_doubt,
    )


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
            saga = Saga.restore(store, saga_id, tools, owner=owner, clock=clock, **options)
        except LeaseError:
            continue  # another process took it first
        try:
            if saga.status.ended:
                continue  # another process finished it since it was listed
            results.append(_result(saga, saga.resume_after_crash()))
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
            saga = AsyncSaga.restore(store, saga_id, tools, owner=owner, clock=clock, **options)
        except LeaseError:
            continue
        try:
            if saga.status.ended:
                continue
            results.append(_result(saga, await saga.resume_after_crash()))
        finally:
            store.release_lease(saga_id, owner)
    return results

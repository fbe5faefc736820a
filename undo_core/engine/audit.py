"""Audit events in Agent Saga's vocabulary (``agent.saga.*``), derived from transitions."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol

from ..vocabulary.records import EventKind, SagaEvent
from ..vocabulary.states import SagaStatus, StepState

__all__ = ["AuditRecord", "AuditSink", "Severity", "audit_listener"]


class Severity(IntEnum):
    """Audit severities; the values are the ``logging`` levels."""

    DEBUG = logging.DEBUG
    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    CRITICAL = logging.CRITICAL


@dataclass(frozen=True, slots=True)
class AuditRecord:
    action: str
    """``agent.saga.started``, ``...step_completed``, ``...compensation_failed``..."""
    severity: Severity
    saga_id: str
    saga_name: str
    step: str | None
    detail: str | None
    event: SagaEvent


class _Emitter(Protocol):
    def emit(self, record: AuditRecord) -> Any: ...


#: Where audit records go: a callable, an object with ``emit(record)``, or a ``logging.Logger``.
AuditSink = Callable[[AuditRecord], Any] | _Emitter | logging.Logger

_STEP_ACTIONS = {
    StepState.COMPLETED: ("agent.saga.step_completed", Severity.INFO),
    StepState.FAILED: ("agent.saga.step_failed", Severity.ERROR),
    StepState.ROLLED_BACK: ("agent.saga.compensated", Severity.INFO),
    StepState.ROLLBACK_FAILED: ("agent.saga.compensation_failed", Severity.CRITICAL),
    StepState.AWAITING_APPROVAL: ("agent.saga.compensation_awaiting_approval", Severity.WARNING),
    StepState.REJECTED: ("agent.saga.compensation_rejected", Severity.WARNING),
    StepState.RESOLVED: ("agent.saga.compensation_resolved", Severity.WARNING),
    StepState.IN_DOUBT: ("agent.saga.step_in_doubt", Severity.CRITICAL),
}
_SAGA_ACTIONS = {
    SagaStatus.IN_PROGRESS: ("agent.saga.started", Severity.INFO),
    SagaStatus.COMPLETED: ("agent.saga.completed", Severity.INFO),
    SagaStatus.FAILED: ("agent.saga.failed", Severity.ERROR),
    SagaStatus.COMPENSATING: ("agent.saga.compensating", Severity.WARNING),
    SagaStatus.ROLLED_BACK: ("agent.saga.rolled_back", Severity.WARNING),
    SagaStatus.ROLLBACK_FAILED: ("agent.saga.rollback_failed", Severity.CRITICAL),
}


def _deliver(sink: AuditSink) -> Callable[[AuditRecord], Any]:
    if isinstance(sink, logging.Logger):
        logger = sink

        def to_logger(record: AuditRecord) -> None:
            logger.log(
                record.severity,
                "%s saga=%s (%s) step=%s %s",
                record.action,
                record.saga_id,
                record.saga_name,
                record.step,
                record.detail or "",
                extra={"audit": record},
            )

        return to_logger
    emit = getattr(sink, "emit", None)
    if callable(emit):
        return emit  # type: ignore[no-any-return]
    if callable(sink):
        return sink
    raise TypeError("audit must be a callable, a logging.Logger or an object with emit()")


def audit_listener(sink: AuditSink) -> Callable[[SagaEvent], None]:
    """A saga listener that turns transitions into :class:`AuditRecord` s for ``sink``."""
    deliver = _deliver(sink)

    def listen(event: SagaEvent) -> None:
        if event.kind is EventKind.STEP:
            entry = _STEP_ACTIONS.get(StepState(event.to_state))
        elif event.kind is EventKind.SAGA:
            entry = _SAGA_ACTIONS.get(SagaStatus(event.to_state))
        else:
            entry = None
        if entry is not None:
            action, severity = entry
            deliver(
                AuditRecord(
                    action=action,
                    severity=severity,
                    saga_id=event.saga_id,
                    saga_name=event.saga_name,
                    step=event.step_id,
                    detail=event.detail,
                    event=event,
                )
            )

    return listen

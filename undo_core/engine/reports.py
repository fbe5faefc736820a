"""What a rollback leaves behind, and the message and error that tell a human about it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..vocabulary.errors import SagaRollbackError
from ..vocabulary.records import SagaRecord
from ..vocabulary.states import SagaStatus
from .steps import StepRow

__all__ = ["RollbackReport", "rollback_error", "rollback_fields", "rollback_message"]


@dataclass(frozen=True, slots=True)
class RollbackReport:
    """What a rollback (or resume) left behind, step ids newest first."""

    status: SagaStatus
    rolled_back: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    """Steps whose undo failed (ROLLBACK_FAILED)."""
    skipped: tuple[str, ...] = ()
    """Completed steps with no undo: their side effects remain."""
    rejected: tuple[str, ...] = ()
    resolved: tuple[str, ...] = ()
    in_doubt: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    """Steps that still need a human: failed, in doubt, awaiting approval or never reached."""

    @property
    def clean(self) -> bool:
        """Every side effect was undone by its own undo."""
        return self.status is SagaStatus.ROLLED_BACK and not (
            self.skipped or self.rejected or self.resolved
        )


def _label(steps: Mapping[str, StepRow], ids: Iterable[str]) -> str:
    return ", ".join(f'"{i}" ({steps[i].tool_name})' for i in ids)


def rollback_message(steps: Mapping[str, StepRow], report: RollbackReport, failed: StepRow) -> str:
    """agent-undo's exact message for a clean rollback; a plain account otherwise."""
    head = f'Task failed at step "{failed.id}" ({failed.tool_name}).'
    if report.clean:
        return f"{head} All prior side-effects successfully rolled back."
    parts = [head]
    if report.rolled_back:
        parts.append(f"Rolled back: {_label(steps, report.rolled_back)}.")
    if report.resolved:
        parts.append(f"Resolved by hand: {_label(steps, report.resolved)}.")
    for sid in report.rejected:
        note = steps[sid].decision_note
        parts.append(
            f'Undo of step {_label(steps, [sid])} was rejected by an approver ("{note}"); '
            "its side-effects remain."
        )
    if report.skipped:
        parts.append(f"No undo defined, side-effects remain: {_label(steps, report.skipped)}.")
    for sid in report.failed:
        parts.append(
            f"Rollback failed: the undo of step {_label(steps, [sid])} raised: {steps[sid].error}."
        )
    if report.in_doubt:
        parts.append(
            f"In doubt (its process stopped while it ran): {_label(steps, report.in_doubt)}."
        )
    if report.unresolved:
        parts.append(
            f"Manual intervention required; unresolved steps: {', '.join(report.unresolved)}."
        )
    return " ".join(parts)


def rollback_error(
    saga: SagaRecord,
    steps: Mapping[str, StepRow],
    report: RollbackReport,
    failed: StepRow,
    cause: BaseException,
    unsaved: BaseException | None,
    undo_failure: tuple[BaseException, StepRow] | None,
) -> SagaRollbackError:
    """The error ``execute`` raises once its step ``failed`` and the rollback ran.

    ``unsaved`` is the first change the rollback could not store (named in the
    message unless it is the cause itself), ``undo_failure`` the first undo that
    failed and its step.
    """
    message = rollback_message(steps, report, failed)
    if unsaved is not None and str(unsaved) != str(cause):
        message += f" Some of this could not be saved to the store: {unsaved}"
    return SagaRollbackError(
        message,
        saga_id=saga.id,
        saga_name=saga.name,
        status=saga.status,
        cause=cause,
        failed_step=failed.id,
        failed_step_name=failed.tool_name,
        **rollback_fields(report, undo_failure),
    )


def rollback_fields(
    report: RollbackReport, undo_failure: tuple[BaseException, StepRow] | None
) -> dict[str, Any]:
    """What every rollback error says of its rollback: the first failed undo, and where
    each step ended (``SagaRollbackError`` and its subclasses take these keywords)."""
    comp_error, comp_step = undo_failure if undo_failure is not None else (None, None)
    return {
        "compensation_cause": comp_error,
        "failed_comp_step_name": comp_step.tool_name if comp_step else None,
        "failed_comp_step": comp_step.id if comp_step else None,
        "rolled_back": report.rolled_back,
        "failed": report.failed,
        "skipped": report.skipped,
        "rejected": report.rejected,
        "unresolved": report.unresolved,
    }

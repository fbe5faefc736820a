"""What an operator's action did to each item, read back from the record after it was taken.

Asking for a retry or a resolve only records a request: a worker (sagaboard's
sagas) or the agent's SDK (sagas the agent runs) carries it out, at once when
tasks run eagerly, later otherwise. Approving lets the rollback go on the same
way. So "done" is never assumed from the request having been accepted: each
item is read back and reported as what it now is:

- ``succeeded``: the undo ran (ROLLED_BACK), the step was resolved or left, or
  the rejection was recorded;
- ``failed``: the undo ran and failed again (with its error);
- ``requested``: accepted, not carried out yet (queued for a worker, or waiting
  for the agent's process);
- ``waiting``: an approval vote was recorded, another approver is still needed;
- ``awaiting``: a retry of an undo that needs approval waits for the approver (it
  runs once approved; nothing was attempted);
- ``refused``: nothing was done, and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sagaboard.approvals.services.approvals import DecisionRefused, Outcome, approval_progress
from sagaboard.models import Approval, Saga, Step
from undo_core import DecisionAction, StepState

RESULTS = {
    "succeeded": "succeeded",
    "failed": "failed",
    "requested": "requested, not run yet",
    "waiting": "waiting for another approver",
    "awaiting": "waiting for approval",
    "refused": "refused",
}
"""Each result and how the summary line counts it, in the order it lists them."""

VERBS: dict[str, str] = {
    DecisionAction.RETRY: "Retry",
    DecisionAction.RESOLVE: "Force-resolve",
    DecisionAction.LEAVE: "Leave failed",
    DecisionAction.APPROVE: "Approve",
    DecisionAction.REJECT: "Reject",
}
"""Each action's name on a button and in a report: the one place the pages take it from."""

_FAILED = (StepState.ROLLBACK_FAILED, StepState.IN_DOUBT)


@dataclass(frozen=True)
class ItemOutcome:
    """One item of an action: what it is, what became of it, and why."""

    pk: int
    result: str
    """A key of ``RESULTS``."""
    detail: str
    tool_name: str = ""
    step_id: str = ""
    saga: Saga | None = None
    """None when the item was refused before it could be found (another project's id)."""
    refusal_status: int = 409
    """A refusal's HTTP status (the service error's own)."""

    @property
    def result_label(self) -> str:
        return RESULTS[self.result]

    @property
    def line(self) -> str:
        """The item as one line of text (a message without htmx)."""
        what = f"#{self.pk}"
        if self.saga is not None:
            what = f"{self.tool_name} ({self.step_id}) in {self.saga.name} [{self.saga.saga_id}]"
        return f"{what}: {self.result_label}: {self.detail}"


@dataclass(frozen=True)
class Report:
    """A whole (bulk) action: one summary line and every item's outcome."""

    verb: str
    items: list[ItemOutcome]

    def count(self, result: str) -> int:
        return sum(1 for item in self.items if item.result == result)

    @property
    def summary(self) -> str:
        """E.g. "Retry, 2 selected: 1 succeeded, 1 failed." (only the results that occur)."""
        parts = [f"{n} {label}" for key, label in RESULTS.items() if (n := self.count(key))]
        return f"{self.verb}, {len(self.items)} selected: {', '.join(parts)}."

    @property
    def ok(self) -> bool:
        """Nothing refused and nothing failed (the rest is done or honestly pending)."""
        return not (self.count("refused") or self.count("failed"))

    @property
    def tone(self) -> str:
        """The message's colour: success only when every item is done (never for a pending
        request), info when some wait, error when any was refused or failed."""
        if not self.ok:
            return "error"
        return "success" if self.count("succeeded") == len(self.items) else "info"

    @property
    def refusal_status(self) -> int:
        """Every item refused for one reason: that reason's status, as for a single item (a
        viewer's bulk approve is 403, another project's ids 404); for mixed reasons, 409."""
        statuses = {item.refusal_status for item in self.items if item.result == "refused"}
        return statuses.pop() if len(statuses) == 1 else 409


def _refused(pk: int, refused: DecisionRefused) -> ItemOutcome:
    return ItemOutcome(pk, "refused", refused.message, refusal_status=refused.status)


def _waits_for(saga: Saga) -> str:
    if saga.driver == Saga.Driver.SERVER:
        return "queued for a worker"
    return "waiting for the agent's process to carry it out"


def step_outcome(action: str, step: Step) -> tuple[str, str]:
    """(result, detail) of ``action`` on ``step`` as the step now stands."""
    if action == "leave":
        return "succeeded", "left failed: off the needs-attention list, the saga stays as it is"
    if action == "retry" and (why := retry_needs_approval(step)):
        return "awaiting", why
    if step.pending_action:
        return "requested", f"{action} {_waits_for(step.saga)}"
    if step.state == StepState.COMPENSATING:
        return "requested", "the undo is running now"
    if step.state == StepState.ROLLED_BACK:
        return "succeeded", "the undo ran: ROLLED_BACK"
    if step.state == StepState.RESOLVED:
        return "succeeded", "resolved by hand: RESOLVED"
    if step.state in _FAILED:
        error = f": {step.error}" if step.error else ""
        return "failed", f"the undo failed again, the step is {step.state}{error}"
    return "succeeded", f"the step is {step.state}"


def retry_needs_approval(step: Step) -> str:
    """Why the step's pending retry waits for an approver ('' if it does not): the worker
    found so (``retry_waits_for_approval``), or the request already said so."""
    request = step.pending_action or {}
    return step.retry_waits_for_approval or str(request.get("needs_approval") or "")


def steps_report(action: str, results: Sequence[tuple[int, Step | DecisionRefused]]) -> Report:
    """What a retry / resolve / leave did to each step, read back after it was asked for."""
    asked = [pk for pk, r in results if not isinstance(r, DecisionRefused)]
    now = Step.objects.select_related("saga__project").in_bulk(asked)
    items: list[ItemOutcome] = []
    for pk, r in results:
        if isinstance(r, DecisionRefused):
            items.append(_refused(pk, r))
            continue
        step = now.get(pk, r)
        result, detail = step_outcome(action, step)
        items.append(ItemOutcome(pk, result, detail, step.tool_name, step.step_id, step.saga))
    return Report(VERBS.get(action, action), items)


def approval_outcome(approval: Approval) -> tuple[str, str]:
    """(result, detail) of a decision on ``approval`` as it and its step now stand."""
    if approval.status == Approval.Status.PENDING:
        return "waiting", approval_progress(approval, approval.votes.count())
    if approval.status == Approval.Status.REJECTED:
        return "succeeded", "rejected: this undo will not run"
    if approval.status != Approval.Status.APPROVED:
        return "refused", f"the approval is {approval.status}: {approval.decided_reason}"
    step = approval.step
    if step.state == StepState.ROLLED_BACK:
        return "succeeded", "approved, and the undo ran: ROLLED_BACK"
    if step.state in _FAILED:
        error = f": {step.error}" if step.error else ""
        return "failed", f"approved, but the undo failed, the step is {step.state}{error}"
    if step.state == StepState.COMPENSATING:
        return "requested", "approved; the undo is running now"
    return "requested", f"approved; the undo is {_waits_for(approval.saga)}"


def approvals_report(
    decision: str, results: Sequence[tuple[int, Outcome | DecisionRefused]]
) -> Report:
    """What an approve / reject did to each approval, read back after the decision."""
    asked = [pk for pk, r in results if not isinstance(r, DecisionRefused)]
    now = Approval.objects.select_related("step", "saga__project").in_bulk(asked)
    items: list[ItemOutcome] = []
    for pk, r in results:
        if isinstance(r, DecisionRefused):
            items.append(_refused(pk, r))
            continue
        approval = now.get(pk, r.approval)
        result, detail = approval_outcome(approval)
        step = approval.step
        items.append(ItemOutcome(pk, result, detail, step.tool_name, step.step_id, approval.saga))
    return Report(VERBS.get(decision, decision), items)

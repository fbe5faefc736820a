"""Pages where people decide: the approval queue and the failed undos (needs attention).

Thin views: permissions and rules are checked in sagaboard.approvals.services.approvals and
sagaboard.actions.services.operator_actions (server-side, whatever buttons a page shows).
Actions are
htmx posts that answer with the fragment to swap (and a status message);
without htmx they redirect back with the same message.

A retry or resolve that is only requested when the answer is sent (a worker or the agent
carries it out) answers with a message that follows it: ``data-follow`` names
``step_outcome``, which queue.js asks again when the message arrives and whenever a live
update of the page re-renders a step, until the outcome is on the record ("Retry failed:
..."). One message per outcome, however fast the undo ran or failed.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseNotFound
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from sagaboard.access.reads import visible
from sagaboard.actions.pages import presenters
from sagaboard.actions.services import action_reports, operator_actions, work_queues
from sagaboard.approvals.services import approvals
from sagaboard.collab.services import ownership
from sagaboard.errors import ServiceError
from sagaboard.models import CompensationAttempt, Step
from sagaboard.ui.next_path import next_path
from undo_core import APPROVAL_DECISIONS, CARRIED_OUT, STEP_ACTIONS, StepState


def _ids(request: HttpRequest, name: str) -> list[int]:
    return [int(v) for v in request.POST.getlist(name) if v.isdigit()][: work_queues.QUEUE_LIMIT]


def _htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def _answer(
    request: HttpRequest,
    *,
    back: str,
    text: str,
    ok: bool,
    status: int = 200,
    fragment: str | None = None,
    context: dict[str, object] | None = None,
    pending: bool = False,
) -> HttpResponse:
    """``pending``: accepted, not carried out yet (an info message, never a success)."""
    if not _htmx(request):
        (messages.info if pending else messages.success if ok else messages.error)(request, text)
        return redirect(back)
    return render(
        request,
        fragment or "sagaboard/_flash.html",
        {"flash": text, "ok": ok, "pending": pending, **(context or {})},
        status=status,
    )


def _bulk_answer(request: HttpRequest, back: str, report: action_reports.Report) -> HttpResponse:
    """A bulk action's report: a summary line, then what became of each item and why
    (done, failed again, only requested, refused), never "done" for a mere request."""
    status = report.refusal_status if report.count("refused") == len(report.items) else 200
    if not _htmx(request):
        (messages.success if report.ok else messages.error)(request, report.summary)
        for item in report.items:
            messages.info(request, item.line)
        return redirect(back)
    return render(request, "sagaboard/_bulk_report.html", {"report": report}, status=status)


def _all(shown: int, count: Callable[[], int]) -> int:
    """Every item waiting, for "act on all matching": the page's own count unless it was
    cut at ``QUEUE_LIMIT`` (then one COUNT query: a page of the usual size costs none)."""
    return count() if shown >= work_queues.QUEUE_LIMIT else shown


# ---------------------------------------------------------------- approvals


@login_required
@require_GET
def approval_queue(request: HttpRequest) -> HttpResponse:
    """Pending approvals, oldest first, with what failed and exactly what would run."""
    last_log_id = visible.last_event_id()  # first: what commits later is sent live
    projects = visible.projects_for_user(request.user)
    pending = work_queues.approvals_pending(projects)
    context = {
        "approvals": presenters.queue_items(pending),
        "can_decide": request.user.has_perm("sagaboard.decide_approval"),
        "last_log_id": last_log_id,
        "projects": projects,
        "batch_actions": [(d.value, action_reports.VERBS[d]) for d in APPROVAL_DECISIONS],
        "batch_total": _all(len(pending), lambda: work_queues.approvals_pending_count(projects)),
    }
    return render(request, "sagaboard/approval_queue.html", context)


@login_required
@require_POST
def approval_decide(request: HttpRequest, pk: int) -> HttpResponse:
    decision = request.POST.get("decision", "")
    try:
        outcome = approvals.approval_decide(
            approval_id=pk,
            user=request.user,
            decision=decision,
            reason=request.POST.get("reason", ""),
        )
    except ServiceError as refused:
        return _answer(
            request, back="approval_queue", text=refused.message, ok=False,
            status=refused.status,
        )  # fmt: skip
    a = outcome.approval
    if outcome.decided:
        text = f"{a.step.tool_name} ({a.saga.name}): {a.status.lower()}."
    else:
        text = f"{a.step.tool_name} ({a.saga.name}): {outcome.progress}."
    return _answer(request, back="approval_queue", text=text, ok=True)


@login_required
@require_POST
def approvals_bulk(request: HttpRequest) -> HttpResponse:
    """Approve or reject every selected approval with one reason; says what happened to each."""
    ids = _ids(request, "approval")
    if not ids:
        return _answer(
            request, back="approval_queue", text="Select at least one.", ok=False, status=400
        )
    results = approvals.approvals_decide_many(
        approval_ids=ids, user=request.user,
        decision=request.POST.get("decision", ""), reason=request.POST.get("reason", ""),
    )  # fmt: skip
    report = action_reports.approvals_report(request.POST.get("decision", ""), results)
    return _bulk_answer(request, "approval_queue", report)


# ---------------------------------------------------------------- failed undos


@login_required
@require_GET
def attention(request: HttpRequest) -> HttpResponse:
    """Failed and in-doubt undos, grouped by error signature, with every attempt so far."""
    last_log_id = visible.last_event_id()  # first: what commits later is sent live
    projects = visible.projects_for_user(request.user)
    groups = work_queues.failures_open(projects)
    context = {
        "groups": groups,
        "can_operate": request.user.has_perm("sagaboard.retry_compensation"),
        "last_log_id": last_log_id,
        "projects": projects,
        "batch_actions": [(a.value, action_reports.VERBS[a]) for a in STEP_ACTIONS],
        "batch_total": _all(
            sum(g.size for g in groups), lambda: work_queues.failures_open_count(projects)
        ),
    }
    return render(request, "sagaboard/attention.html", context)


_FOLLOWED = CARRIED_OUT
"""The actions a worker or the agent carries out after the answer (a leave is immediate)."""
_WAITING = (StepState.ROLLBACK_FAILED, StepState.IN_DOUBT)


def _last_attempt(step_pk: int) -> int:
    """The number of the step's newest undo attempt (0: none yet)."""
    last = (
        CompensationAttempt.objects.filter(step_id=step_pk)
        .order_by("-number")
        .values_list("number", flat=True)
        .first()
    )
    return int(last or 0)


def _carried_out(action: str, step: Step, after: int) -> bool:
    """Whether ``action``'s outcome is on the record: the request is no longer pending, or,
    for a retry, an undo attempt newer than ``after`` has finished (whatever the pending
    request still says: the worker clears it after its last write); for a resolve, the
    step no longer waits."""
    if step.state == StepState.COMPENSATING:
        return False
    if not step.pending_action:
        return True  # whoever carried it out is done with it (its outcome is the step's)
    if action == "retry":
        newest = step.attempts.order_by("-number").first()
        return newest is not None and newest.number > after and newest.finished_at is not None
    return step.state not in _WAITING


def _step_message(action: str, step: Step, after: int) -> tuple[str, bool, bool]:
    """(the message, whether it is good news, whether it is the outcome) of ``action`` on
    ``step`` as the step now stands; ``after``: its newest attempt before the request."""
    done = action == "leave" or _carried_out(action, step, after)
    if done and step.pending_action:
        step.pending_action = None  # read as carried out (not saved: the worker clears it)
    result, detail = action_reports.step_outcome(action, step)
    verb = action_reports.VERBS[action]  # type: ignore[index]  # keyed by str enums
    headline = {
        "requested": f"{verb} requested",
        "awaiting": f"{verb} waits for approval",
        "succeeded": "Left failed" if action == "leave" else f"{verb} done",
        "failed": f"{verb} failed",
    }[result]
    text = f"{headline}: {step.tool_name} ({step.step_id}) in {step.saga.name}."
    if result != "requested" and action != "leave":
        text = f"{text[:-1]}: {detail}."
    # A retry waiting for its approver is at rest (not followed) but not done: info.
    return text, result != "failed", result not in ("requested", "awaiting")


def _follow_url(step: Step, action: str, after: int) -> str:
    query = urlencode({"action": action, "after": after})
    return f"{reverse('step_outcome', args=[step.pk])}?{query}"


@login_required
@require_POST
def step_action(request: HttpRequest, pk: int) -> HttpResponse:
    """Retry, resolve or leave one failed undo (from the attention page or the saga page)."""
    back = next_path(request) or "attention"  # never redirect off-site
    action = request.POST.get("action", "")
    after = _last_attempt(pk)  # the request's own attempt, if any, comes after this one
    try:
        step = operator_actions.step_act(
            step_pk=pk, user=request.user, action=action, reason=request.POST.get("reason", ""),
        )  # fmt: skip
    except ServiceError as refused:
        return _answer(request, back=back, text=refused.message, ok=False,
                       status=refused.status)  # fmt: skip
    step.refresh_from_db()  # a retry may have run already (tasks run eagerly): say what it did
    text, ok, outcome = _step_message(action, step, after)
    # A retry that waits for its approver is at rest: the decision ends it, not a poll.
    waits = action == "retry" and bool(action_reports.retry_needs_approval(step))
    follow = "" if outcome or waits or action not in _FOLLOWED else _follow_url(step, action, after)
    return _answer(
        request, back=back, text=text, ok=ok, pending=not outcome,
        context={"follow": follow},
    )  # fmt: skip


@login_required
@require_GET
def step_outcome(request: HttpRequest, pk: int) -> HttpResponse:
    """The message of a retry or resolve asked for on the step, read again from the record:
    still requested (and followed), or its outcome. queue.js asks for it (``step_action``)."""
    action, after = request.GET.get("action", ""), request.GET.get("after", "")
    if action not in _FOLLOWED or not after.isdigit() or len(after) > 9:
        return HttpResponseBadRequest("action must be retry or resolve, after a number")
    projects = visible.projects_for_user(request.user)
    step = (
        Step.objects.select_related("saga__project")
        .filter(pk=pk, saga__project__in=projects)
        .first()
    )
    if step is None:
        return HttpResponseNotFound("no such step in your projects")
    text, ok, outcome = _step_message(action, step, int(after))
    waits = action == "retry" and bool(action_reports.retry_needs_approval(step))
    follow = "" if outcome or waits else _follow_url(step, action, int(after))
    context = {"flash": text, "ok": ok, "pending": not outcome, "follow": follow}
    return render(request, "sagaboard/_flash.html", context)


@login_required
@require_POST
def step_acknowledge(request: HttpRequest, pk: int) -> HttpResponse:
    """Say "I am on it" about one failed undo (``collab.services.ownership``): marked for
    everyone."""
    try:
        step = ownership.step_acknowledge(user=request.user, step_pk=pk)
    except ServiceError as refused:
        return _answer(request, back="attention", text=refused.message, ok=False,
                       status=refused.status)  # fmt: skip
    text = f"Acknowledged: {step.tool_name} ({step.step_id}) in {step.saga.name}."
    return _answer(request, back="attention", text=text, ok=True)


@login_required
@require_POST
def steps_bulk(request: HttpRequest) -> HttpResponse:
    """One action for a selection of failed undos (or a whole error group), with one reason."""
    ids = _ids(request, "step")
    expected = request.POST.get("expected", "")
    if not ids:
        return _answer(request, back="attention", text="Select at least one.", ok=False, status=400)
    if expected.isdigit() and int(expected) != len(ids):
        return _answer(
            request, back="attention", ok=False, status=409,
            text=f"The selection changed ({len(ids)} now, {expected} confirmed): "
            "check and confirm again.",
        )  # fmt: skip
    results = operator_actions.steps_act_many(
        step_pks=ids, user=request.user, action=request.POST.get("action", ""),
        reason=request.POST.get("reason", ""),
    )  # fmt: skip
    report = action_reports.steps_report(request.POST.get("action", ""), results)
    return _bulk_answer(request, "attention", report)

"""Pages where people decide: the approval queue and the failed undos (needs attention).

Thin views: permissions and rules are checked in sagaboard.domain.approvals and
sagaboard.domain.operator_actions (server-side, whatever buttons a page shows). Actions are
htmx posts that answer with the fragment to swap (and a status message);
without htmx they redirect back with the same message.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from sagaboard.domain import action_reports, approvals, operator_actions, ownership, work_queues
from sagaboard.errors import ServiceError
from sagaboard.selectors import visible
from sagaboard.web import presenters
from sagaboard.web.next_path import next_path


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
) -> HttpResponse:
    if not _htmx(request):
        (messages.success if ok else messages.error)(request, text)
        return redirect(back)
    return render(
        request,
        fragment or "sagaboard/_flash.html",
        {"flash": text, "ok": ok, **(context or {})},
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
    projects = visible.projects_for_user(request.user)
    pending = work_queues.approvals_pending(projects)
    context = {
        "approvals": presenters.queue_items(pending),
        "can_decide": request.user.has_perm("sagaboard.decide_approval"),
        "last_log_id": visible.last_event_id(),
        "projects": projects,
        "batch_actions": [("approve", "Approve"), ("reject", "Reject")],
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
        text = f"{a.step.tool_name} ({a.saga.name}): your approval is in; {a.required} needed."
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
    projects = visible.projects_for_user(request.user)
    groups = work_queues.failures_open(projects)
    context = {
        "groups": groups,
        "can_operate": request.user.has_perm("sagaboard.retry_compensation"),
        "last_log_id": visible.last_event_id(),
        "projects": projects,
        "batch_actions": [
            ("retry", "Retry"),
            ("resolve", "Force-resolve"),
            ("leave", "Leave failed"),
        ],
        "batch_total": _all(
            sum(g.size for g in groups), lambda: work_queues.failures_open_count(projects)
        ),
    }
    return render(request, "sagaboard/attention.html", context)


@login_required
@require_POST
def step_action(request: HttpRequest, pk: int) -> HttpResponse:
    """Retry, resolve or leave one failed undo (from the attention page or the saga page)."""
    back = next_path(request) or "attention"  # never redirect off-site
    try:
        step = operator_actions.step_act(
            step_pk=pk, user=request.user, action=request.POST.get("action", ""),
            reason=request.POST.get("reason", ""),
        )  # fmt: skip
    except ServiceError as refused:
        return _answer(request, back=back, text=refused.message, ok=False,
                       status=refused.status)  # fmt: skip
    action = request.POST["action"]
    step.refresh_from_db()  # a retry may have run already (tasks run eagerly): say what it did
    result, detail = action_reports.step_outcome(action, step)
    headline = {
        "requested": f"{action_reports.VERBS[action]} requested",
        "succeeded": "Left failed" if action == "leave" else f"{action_reports.VERBS[action]} done",
        "failed": f"{action_reports.VERBS[action]} failed",
    }[result]
    text = f"{headline}: {step.tool_name} ({step.step_id}) in {step.saga.name}."
    if result != "requested" and action != "leave":
        text = f"{text[:-1]}: {detail}."
    return _answer(request, back=back, text=text, ok=result != "failed")


@login_required
@require_POST
def step_acknowledge(request: HttpRequest, pk: int) -> HttpResponse:
    """Say "I am on it" about one failed undo (``domain.ownership``): marked for everyone."""
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

"""Deciding from elsewhere: the page a mailed decision link opens, and Slack's buttons.

Thin views. The rules are in ``sagaboard.approvals.services.decision_links`` and
``sagaboard.approvals.services.slack``,
which decide through ``approvals.approval_decide`` as the queue page does. Opening a link
(GET) only shows what would be decided; the decision is a CSRF-checked POST of the page's form.
A link that cannot be used (forged, someone else's, used, expired) gets a page saying so, with
its 4xx status. The Slack endpoint has no session and no CSRF token: Slack's signature is its
authentication (checked before anything is read).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from sagaboard.access.reads import visible
from sagaboard.actions.pages import presenters
from sagaboard.actions.services import work_queues
from sagaboard.approvals.services import decision_links, slack
from sagaboard.errors import ServiceError


def _refused(request: HttpRequest, refused: ServiceError) -> HttpResponse:
    return render(
        request, "sagaboard/decide_refused.html", {"message": refused.message},
        status=refused.status,
    )  # fmt: skip


@login_required
@require_http_methods(["GET", "POST"])
def decision_link(request: HttpRequest, token: str) -> HttpResponse:
    """The confirm page of one person's decision link: the approval in full, Approve/Reject."""
    try:
        link = decision_links.link_check(token=token, user=request.user)
    except ServiceError as refused:
        return _refused(request, refused)
    context: dict[str, object] = {"token": token, "open": True}
    status = 200
    if request.method == "POST":
        try:
            outcome = decision_links.link_decide(
                token=token, user=request.user, decision=request.POST.get("decision", ""),
                reason=request.POST.get("reason", ""),
            )  # fmt: skip
        except decision_links.LinkRefused as refused:
            return _refused(request, refused)
        except ServiceError as refused:
            context.update(flash=refused.message, ok=False)
            status = refused.status
        else:
            a = outcome.approval
            text = (
                f"Done: the undo is {a.status.lower()}."
                if outcome.decided
                else f"Your approval is counted: {outcome.progress}."
            )
            context.update(flash=text, ok=True, open=False)
    approval = work_queues.approval_shown(visible.projects_for_user(request.user), link.approval_id)
    if approval is None:  # not (or no longer) in the person's projects, or their roles
        gone = ServiceError(404, "not_found", "No such approval in your projects.")
        if status != 200:
            gone = ServiceError(status, "refused", str(context["flash"]))
        return _refused(request, gone)
    context["a"] = presenters.queue_items([approval])[0]
    context["open"] = context["open"] and approval.is_pending
    return render(request, "sagaboard/decide.html", context, status=status)


@csrf_exempt
@require_POST
def slack_interactions(request: HttpRequest) -> HttpResponse:
    """Slack's interactivity request URL: a signed ``block_actions`` click on Approve/Reject."""
    if not settings.SAGABOARD_SLACK_SIGNING_SECRET:
        raise Http404("Slack is not set up (SAGABOARD_SLACK_SIGNING_SECRET)")
    body = request.body  # the raw bytes, as signed: read before the form is parsed
    try:
        slack.request_verify(
            body=body,
            timestamp=request.headers.get("X-Slack-Request-Timestamp", ""),
            signature=request.headers.get("X-Slack-Signature", ""),
        )
        answer = slack.interaction_handle(slack.payload_parse(request.POST.get("payload", "")))
    except ServiceError as refused:
        return JsonResponse({"error": refused.body()}, status=refused.status)
    return JsonResponse({"ok": answer.ok, "text": answer.text})

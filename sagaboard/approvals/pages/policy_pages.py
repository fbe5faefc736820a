"""Admin pages: approval policies (list, create, edit) and the audit log (filter, CSV export)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import BadRequest
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from sagaboard.access.reads import visible
from sagaboard.approvals.services.policies import PolicyInvalid, policy_save
from sagaboard.audit.services.audit_chain import chains_checked
from sagaboard.infra.http.limits import BIGINT
from sagaboard.models import ApprovalPolicy, AuditEntry, Project
from sagaboard.ui.present import json_text

AUDIT_PAGE = 500
SINCE = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7),
         "30d": timedelta(days=30)}  # fmt: skip


def _forbidden(request: HttpRequest, need: str) -> HttpResponse:
    return render(request, "sagaboard/forbidden.html", {"need": need}, status=403)


def _policy_page(
    request: HttpRequest, projects: list[Project], *, status: int = 200, **extra: object
) -> HttpResponse:
    context = {
        "projects": projects,
        "policies": ApprovalPolicy.objects.filter(project__in=projects).select_related("project"),
        "can_edit": request.user.has_perm("sagaboard.manage_policies"),
        "expiry_choices": ApprovalPolicy.OnExpiry.choices,
        **extra,
    }
    return render(request, "sagaboard/policies.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def policy_list(request: HttpRequest) -> HttpResponse:
    """GET: my projects' policies. POST: a new one (admins)."""
    if not request.user.has_perm("sagaboard.view_approvalpolicy"):
        return _forbidden(request, "viewer")
    projects = visible.projects_for_user(request.user)
    if request.method == "GET":
        return _policy_page(request, projects)
    if not request.user.has_perm("sagaboard.manage_policies"):
        return _forbidden(request, "admin")
    project = next((p for p in projects if p.slug == request.POST.get("project")), None)
    if project is None:
        errors = {"project": "choose one of your projects"}
        return _policy_page(request, projects, status=400, errors=errors, form=request.POST)
    try:
        policy = policy_save(project=project, data=request.POST, user=request.user)
    except PolicyInvalid as invalid:
        return _policy_page(request, projects, status=400, errors=invalid.errors, form=request.POST)
    messages.success(request, f"Policy {policy.name} created; it applies to new approvals.")
    return redirect("policy_list")


@login_required
@require_POST
def policy_edit(request: HttpRequest, pk: int) -> HttpResponse:
    if not request.user.has_perm("sagaboard.manage_policies"):
        return _forbidden(request, "admin")
    projects = visible.projects_for_user(request.user)
    policy = ApprovalPolicy.objects.filter(pk=pk, project__in=projects).first()
    if policy is None:
        messages.error(request, "No such policy in your projects.")
        return redirect("policy_list")
    try:
        policy = policy_save(
            project=policy.project, data=request.POST, user=request.user, policy=policy
        )
    except PolicyInvalid as invalid:
        return _policy_page(
            request, projects, status=400, errors=invalid.errors, editing=pk, form=request.POST
        )
    messages.success(
        request,
        f"Policy {policy.name} is now v{policy.version}; approvals already asked keep theirs.",
    )
    return redirect("policy_list")


def _audit_rows(request: HttpRequest, projects: list[Project]) -> QuerySet[AuditEntry]:
    scope = Q(project__in=projects)
    if request.user.is_superuser:  # failed logins belong to no project: the whole site's
        scope |= Q(project__isnull=True, action__startswith="login.")
    rows = AuditEntry.objects.filter(scope)
    if entry := request.GET.get("entry", ""):  # an entry's permalink: that one entry
        rows = rows.filter(pk=_entry_pk(entry))
    if who := request.GET.get("user", "").strip():
        rows = rows.filter(actor__icontains=who)
    if action := request.GET.get("action", "").strip():
        rows = rows.filter(action__startswith=action)
    if since := SINCE.get(request.GET.get("since", "")):
        rows = rows.filter(at__gte=timezone.now() - since)
    return rows.select_related("project").order_by("-at", "-pk")


def _entry_pk(value: str) -> int:
    if not value.isascii() or not value.isdigit() or not 0 < int(value) <= BIGINT:
        raise BadRequest("entry must be an audit entry's number (a positive integer)")
    return int(value)


@login_required
@require_GET
def audit(request: HttpRequest) -> HttpResponse:
    """Who did what, when and why; filter by user, action and time; ``?format=csv`` exports."""
    if not request.user.has_perm("sagaboard.view_auditentry"):
        return _forbidden(request, "admin")
    projects = visible.projects_for_user(request.user)
    try:
        rows = _audit_rows(request, projects)
    except BadRequest as bad:  # the message names the field
        return HttpResponseBadRequest(str(bad), content_type="text/plain; charset=utf-8")
    if request.GET.get("format") == "csv":
        response = StreamingHttpResponse(_csv(rows.iterator()), content_type="text/csv")
        response["Content-Disposition"] = 'attachment; filename="sagaboard-audit.csv"'
        return response
    query = request.GET.copy()
    query["format"] = "csv"
    entries = list(rows[:AUDIT_PAGE])
    chains = [p.pk for p in projects] + ([0] if request.user.is_superuser else [])
    context = {
        "chains": chains_checked(chains),
        "entries": entries,
        "limit": AUDIT_PAGE,
        "truncated": len(entries) == AUDIT_PAGE,  # maybe more: the page says how to see them
        "chosen": request.GET,
        "csv_query": query.urlencode(),
        "since_choices": [("", "any time"), *[(k, f"last {k}") for k in SINCE]],
    }
    return render(request, "sagaboard/audit.html", context)


class _Echo:
    def write(self, value: str) -> str:
        return value


def _cell(value: object) -> str:
    """A cell that a spreadsheet will not run as a formula (CSV injection)."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _csv(entries: Iterator[AuditEntry]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(["at", "project", "actor", "action", "target", "reason", "data"])
    for e in entries:
        yield writer.writerow(
            [_cell(v) for v in (e.at.isoformat(), e.project.slug if e.project else "",
                                 e.actor, e.action, e.target, e.reason,
                                 json_text(e.data, indent=None))]
        )  # fmt: skip

"""The token page: admins mint (secret shown once), list by prefix and revoke API tokens."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from sagaboard.access.reads import visible
from sagaboard.access.services import tokens
from sagaboard.infra.http.rate_limits import hit, parse_rate, wait_seconds
from sagaboard.models import ApiToken, Project

LABEL_MAX = ApiToken._meta.get_field("label").max_length or 100


def _projects(request: HttpRequest) -> list[Project]:
    """Projects whose tokens this user may see: their own, and only with the admin role."""
    if not request.user.has_perm("sagaboard.view_apitoken"):
        return []
    return visible.projects_for_user(request.user)


def _page(
    request: HttpRequest, projects: list[Project], *, status: int = 200, **extra: object
) -> HttpResponse:
    context = {
        "projects": projects,
        "tokens": ApiToken.objects.filter(project__in=projects)
        .select_related("project", "created_by")
        .order_by("-created_at", "-pk"),
        "can_create": request.user.has_perm("sagaboard.add_apitoken"),
        "can_revoke": request.user.has_perm("sagaboard.change_apitoken"),
        "label_max": LABEL_MAX,
        **extra,
    }
    response = render(request, "sagaboard/tokens.html", context, status=status)
    response["Cache-Control"] = "no-store"  # the page may hold a secret shown once
    return response


@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    """GET: the tokens of my projects. POST: mint one; its secret is in this response only."""
    projects = _projects(request)
    if not projects:
        return render(request, "sagaboard/forbidden.html", {"need": "admin"}, status=403)
    if request.method == "GET":
        return _page(request, projects)
    if not request.user.has_perm("sagaboard.add_apitoken"):
        return render(request, "sagaboard/forbidden.html", {"need": "admin"}, status=403)
    slug = request.POST.get("project", "")
    label = request.POST.get("label", "").strip()
    project = next((p for p in projects if p.slug == slug), None)
    errors = {}
    if project is None:
        errors["project"] = "Choose one of your projects."
    if not label:
        errors["label"] = "A label is required: say which agent or service will use the token."
    elif len(label) > LABEL_MAX:
        errors["label"] = f"At most {LABEL_MAX} characters."
    if errors or project is None:
        return _page(request, projects, status=400, errors=errors, form=request.POST)
    # A stolen admin session should not mint tokens by the hundred.
    rate, who = parse_rate(settings.SAGABOARD_TOKEN_MINT_RATE), str(request.user.pk)
    if wait := wait_seconds("token-mint", who, rate):
        errors["mint"] = f"Too many tokens made: try again in {wait} s."
        response = _page(request, projects, status=429, errors=errors, form=request.POST)
        response["Retry-After"] = str(wait)
        return response
    minted = tokens.token_create(project=project, label=label, acting_user=request.user)
    hit("token-mint", who, rate)
    return _page(request, projects, status=201, minted=minted)


@login_required
@require_POST
def token_revoke(request: HttpRequest, prefix: str) -> HttpResponse:
    """Revoke at once (the next request with it gets 401); a reason is required and audited."""
    if not request.user.has_perm("sagaboard.change_apitoken"):
        return render(request, "sagaboard/forbidden.html", {"need": "admin"}, status=403)
    token = ApiToken.objects.filter(prefix=prefix, project__in=_projects(request)).first()
    if token is None:
        messages.error(request, "No such token in your projects.")
        return redirect("token_list")
    reason = request.POST.get("reason", "").strip()
    if not reason:
        messages.error(request, f"Token {token.prefix} was not revoked: a reason is required.")
        return redirect("token_list")
    if token.revoked_at is not None:
        messages.info(request, f"Token {token.prefix} was already revoked.")
        return redirect("token_list")
    tokens.token_revoke(token=token, reason=reason, acting_user=request.user)
    messages.success(request, f"Token {token.prefix} ({token.label}) is revoked.")
    return redirect("token_list")

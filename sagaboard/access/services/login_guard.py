"""Password guessing: failed logins are counted, limited and audited.

Two limits (``sagaboard.infra.http.rate_limits``), checked before the password is: failures
per username *and* IP (``SAGABOARD_LOGIN_RATE``: one person mistyping, or one
attacker on one account) and per IP whatever the username
(``SAGABOARD_LOGIN_IP_RATE``: one attacker trying many accounts). Over either,
every attempt from there, the right password included, gets 429 with
``Retry-After`` until the window passes; the same user on another IP is not
affected, so nobody can lock a colleague out from afar. Both login pages
(``/login/`` and ``/admin/login/``) are covered: the count comes from Django's
``user_login_failed`` signal, which every ``authenticate()`` with a request sends.

Each failure is an audit entry (``login.failed``: the username tried, the IP, the
time; never the password), and the failure that trips a limit one more
(``login.rate_limited``). Refused attempts are not audited one by one, so a
flood cannot fill the audit table. A successful login clears its username+IP count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from sagaboard.infra.http.rate_limits import Rate, client_ip, hit, parse_rate, reset, wait_seconds
from sagaboard.models import AuditEntry, User

LOGIN_VIEWS = frozenset({"login", "admin:login"})
USERNAME_MAX = 150  # Django's own limit; anything longer is cut before it is recorded


def _rates() -> tuple[Rate | None, Rate | None]:
    return parse_rate(settings.SAGABOARD_LOGIN_RATE), parse_rate(settings.SAGABOARD_LOGIN_IP_RATE)


def _user_key(username: str, ip: str) -> str:
    return f"{username.strip().lower()[:USERNAME_MAX]}\n{ip}"


def login_wait(request: HttpRequest, username: str) -> int:
    """Seconds this client must wait before trying ``username`` again (0: go ahead)."""
    per_user, per_ip = _rates()
    ip = client_ip(request)
    return max(
        wait_seconds("login", _user_key(username, ip), per_user),
        wait_seconds("login-ip", ip, per_ip),
    )


def login_failed(sender: Any, credentials: dict[str, Any], request: Any = None, **_: Any) -> None:
    """``user_login_failed`` receiver: count the failure against both limits, and audit it."""
    if request is None:  # authenticate() called outside a request (a script): nothing to limit
        return
    field = get_user_model().USERNAME_FIELD
    username = str(credentials.get(field) or credentials.get("username") or "")[:USERNAME_MAX]
    ip = client_ip(request)
    per_user, per_ip = _rates()
    by_user = hit("login", _user_key(username, ip), per_user)
    by_ip = hit("login-ip", ip, per_ip)
    data = {
        "username": username,
        "ip": ip,
        "path": request.path[:200],
        "user_agent": request.META.get("HTTP_USER_AGENT", "")[:200],
    }
    AuditEntry.objects.create(
        actor=f"ip:{ip}", action="login.failed", target=f"username:{username}", data=data
    )
    tripped = [
        name
        for name, count, rate in (("username+ip", by_user, per_user), ("ip", by_ip, per_ip))
        if rate is not None and count == rate.count
    ]
    if tripped:
        AuditEntry.objects.create(
            actor=f"ip:{ip}",
            action="login.rate_limited",
            target=f"username:{username}",
            reason=f"too many failed logins per {' and per '.join(tripped)}",
            data=data,
        )


def login_succeeded(sender: Any, request: Any = None, user: User | None = None, **_: Any) -> None:
    """``user_logged_in`` receiver: a person who got in starts again from zero mistakes.

    Only the username+IP count: the per-IP count stays, or an attacker with one
    account of their own could wipe the count of their guesses at others.
    """
    if request is None or user is None:
        return
    per_user, _per_ip = _rates()
    reset("login", _user_key(user.get_username(), client_ip(request)), per_user)


class LoginRateLimitMiddleware:
    """Answers 429 to a login POST from a client over its limit, before any password check."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view: Any, args: Any, kwargs: Any
    ) -> HttpResponse | None:
        match = request.resolver_match
        if request.method != "POST" or match is None or match.view_name not in LOGIN_VIEWS:
            return None
        wait = login_wait(request, request.POST.get("username", ""))
        if not wait:
            return None
        minutes = max(1, round(wait / 60))
        response = render(
            request,
            "registration/login.html",
            {
                "throttled": f"Too many failed logins. Try again in about {minutes} "
                f"minute{'s' if minutes != 1 else ''}.",
                "form": AuthenticationForm(request),
                "next": request.POST.get("next", ""),
            },
            status=429,
        )
        response["Retry-After"] = str(wait)
        return response

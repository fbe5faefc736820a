"""Where a form sends its person back: its ``next`` field, if that is a path of this site."""

from __future__ import annotations

from django.http import HttpRequest
from django.utils.http import url_has_allowed_host_and_scheme


def next_path(request: HttpRequest) -> str:
    """The posted ``next`` when it is a path on this site, else "" (never another site:
    ``//evil``, ``/\\evil`` and ``https://evil`` are refused by Django's own check)."""
    wanted = request.POST.get("next", "")
    local = wanted.startswith("/") and url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return wanted if local else ""

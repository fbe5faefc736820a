"""Who calls the API: the token that authenticated the request (``TokenAuth``, the API's
bearer auth, sets it)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from ninja.security import HttpBearer

from sagaboard.access.services.tokens import token_authenticate
from sagaboard.infra.http.rate_limits import RateLimited, client_ip, hit, parse_rate, wait_seconds
from sagaboard.models import ApiToken


def caller_token(request: HttpRequest) -> ApiToken:
    """The request's token; every query of a handler is scoped to its project."""
    token: ApiToken = request.auth  # type: ignore[attr-defined]
    return token


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        found = token_authenticate(token)
        if found is None:
            # Only failures are counted, and only they are refused: a good token pays
            # nothing on this path and still works from an address (a NAT) that also
            # sends bad ones. Guessing a 256-bit secret is hopeless anyway; the limit
            # stops floods of bad tokens and probing.
            ip, rate = client_ip(request), parse_rate(settings.SAGABOARD_API_AUTH_RATE)
            if rate is not None and hit("api-auth", ip, rate) > rate.count:
                raise RateLimited(
                    wait_seconds("api-auth", ip, rate), "failed authentications from this address"
                )
        return found

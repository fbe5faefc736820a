"""Who calls the API: the token that authenticated the request (``v1``'s bearer auth sets it)."""

from __future__ import annotations

from django.http import HttpRequest

from sagaboard.models import ApiToken


def caller_token(request: HttpRequest) -> ApiToken:
    """The request's token; every query of a handler is scoped to its project."""
    token: ApiToken = request.auth  # type: ignore[attr-defined]
    return token

"""Every API answer is JSON, errors included, even those no API handler produced.

The API's own errors already have the shape of docs/api.md (``sagaboard.api``). What is
left comes from the framework around it: a path no route matches (Django's HTML 404),
a method the path does not have (ninja's plain-text 405), a crash that escaped (Django's
HTML 500). This middleware gives those the same shape, keeping the status and headers
(``Allow`` on a 405), so a client parses every error one way.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from inspect import iscoroutinefunction
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.decorators import sync_and_async_middleware

API_PREFIX = "/api/"

_CODES = {
    404: ("not_found", "no such API path"),
    405: ("method_not_allowed", "this path does not take that method"),
    500: ("internal_error", "the server failed; nothing was applied"),
}


@sync_and_async_middleware
def api_errors_as_json(get_response: Callable[[HttpRequest], Any]) -> Callable[..., Any]:
    """Django middleware (sync and async: the web processes serve ASGI without a thread hop)."""
    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponseBase:
            response: Awaitable[HttpResponseBase] = get_response(request)
            return _shaped(request, await response)

        return middleware

    def sync_middleware(request: HttpRequest) -> HttpResponseBase:
        return _shaped(request, get_response(request))

    return sync_middleware


def _shaped(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    if (
        not request.path.startswith(API_PREFIX)
        or response.status_code < 400
        or response.get("Content-Type", "").startswith("application/json")
    ):
        return response
    code, message = _CODES.get(response.status_code, ("error", "the request failed"))
    body = {"error": {"code": code, "message": message}}
    shaped = HttpResponse(
        json.dumps(body),
        status=response.status_code,
        content_type="application/json; charset=utf-8",
    )
    if response.has_header("Allow"):
        shaped["Allow"] = response["Allow"]
    return shaped

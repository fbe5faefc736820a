"""Every API answer is JSON, errors included: the one map from errors to HTTP answers.

Inside the API (``install``, on the NinjaAPI and so on every router it mounts), a
service's ``ServiceError`` becomes its status, ``{"error": body}`` and headers; what the
framework raises (invalid input, no token, a body that is not JSON or too big, a busy
database, a crash) is first turned into a ``ServiceError`` here, then answered the same
way. ``ERRORS`` lists those answers for every operation's schema (docs/api.md, "Errors").

What is left comes from Django around the API: a path no route matches (HTML 404), a
method the path does not have (ninja's plain-text 405), a crash that escaped (HTML
500). The middleware gives those the same shape, keeping the status and headers
(``Allow`` on a 405), so a client parses every error one way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from inspect import iscoroutinefunction
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.decorators import sync_and_async_middleware
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from sagaboard.api.openapi_bounds import WWW_AUTHENTICATE
from sagaboard.api.schemas import ErrorOut
from sagaboard.errors import ServiceError
from sagaboard.infra.db_outage import outage_of, retry_disk_full
from sagaboard.infra.http.api_path import API_PREFIX
from sagaboard.infra.http.json_body import BadValue, NotJson

log = logging.getLogger("sagaboard.api.v1")


# Every operation may answer these, all as ErrorOut (docs/api.md, "Errors"): a body that is
# not JSON (400), no token (401), an unknown id (404), a refused move (409), a body over the
# limit (413, sagaboard.infra.http.body_limit), invalid input or a limit (422), too many bad tokens
# (429), a busy database (503), a database out of disk (507).
ERRORS: dict[int | str, Any] = {
    status: ErrorOut for status in (400, 401, 404, 409, 413, 422, 429, 503, 507)
}

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
    body = {"error": ServiceError(response.status_code, code, message).body()}
    shaped = HttpResponse(
        json.dumps(body),
        status=response.status_code,
        content_type="application/json; charset=utf-8",
    )
    if response.has_header("Allow"):
        shaped["Allow"] = response["Allow"]
    return shaped


# ---------------------------------------------------------------- inside the API


def install(api: NinjaAPI) -> None:
    """Answer every error raised in ``api``'s operations (its routers' too) in one shape."""

    def answer(request: HttpRequest, exc: Exception) -> HttpResponse:
        error = exc if isinstance(exc, ServiceError) else as_service_error(request, exc)
        response = api.create_response(request, {"error": error.body()}, status=error.status)
        for name, value in error.headers.items():
            response[name] = value
        return response

    # ninja looks a handler up along the exception's MRO: its own defaults for its errors
    # are replaced by naming them, anything else falls through to Exception.
    kinds: tuple[type[Exception], ...] = (ServiceError, *_TRANSLATIONS, Exception)
    for kind in kinds:
        api.add_exception_handler(kind, answer)  # type: ignore[arg-type]  # ninja's hint is loose


def as_service_error(request: HttpRequest, exc: Exception) -> ServiceError:
    """What the framework raised, as the service error a client is answered with."""
    for kind, translate in _TRANSLATIONS.items():
        if isinstance(exc, kind):
            return translate(exc)
    # A bug, not the client's fault: logged with its traceback, answered in the API's shape
    # (never Django's HTML page). The request's transaction has been rolled back.
    log.error("API request failed: %s %s", request.method, request.path, exc_info=exc)
    return ServiceError(500, "internal_error", "the server failed; nothing was applied")


def _invalid(exc: Exception) -> ServiceError:
    assert isinstance(exc, ValidationError)
    first = exc.errors[0] if exc.errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "payload", "query", "path")]
    # Items of a list by their index in brackets (events[0].step.attempts[1].number), as
    # the checks of a whole batch and of JSON values name them.
    field = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".") or None
    index = int(loc[1]) if len(loc) > 1 and loc[0] == "events" and loc[1].isdigit() else None
    message = first.get("msg", "invalid request")
    message = f"{field}: {message}" if field else message
    return ServiceError(422, "validation_error", message, field, index=index)


def _unauthorized(exc: Exception) -> ServiceError:
    message = "a valid 'Authorization: Bearer' token is required"
    return ServiceError(
        401, "unauthorized", message, headers={"WWW-Authenticate": WWW_AUTHENTICATE}
    )  # RFC 6750


def _http_error(exc: Exception) -> ServiceError:
    assert isinstance(exc, HttpError)
    cause = exc.__cause__
    if isinstance(cause, BadValue):  # a value the body holds cannot be stored: name it
        field = cause.path or None
        index = None
        if field is not None and field.startswith("events["):
            index = int(field[len("events[") : field.index("]")])
        return ServiceError(422, "validation_error", str(cause), field, index=index)
    if exc.status_code == 400:
        message = str(cause) if isinstance(cause, NotJson) else "the request body is not valid JSON"
        return ServiceError(400, "malformed_json", message)
    return ServiceError(exc.status_code, "error", str(exc))


def _unavailable(exc: Exception) -> ServiceError:
    # The database is busy, away or out of disk: nothing was applied; the client retries.
    if outage_of(exc) == "disk_full":
        return ServiceError(
            507, "insufficient_storage",
            "the database's disk is full: nothing was applied; retry once space is freed",
            headers={"Retry-After": str(retry_disk_full())},
        )  # fmt: skip
    return ServiceError(503, "unavailable", "the database is unavailable; retry shortly")


def _too_big(exc: Exception) -> ServiceError:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    message = f"the body is over {limit} bytes (SAGABOARD_API_MAX_BODY)"
    return ServiceError(413, "payload_too_large", message)


_TRANSLATIONS: dict[type[Exception], Callable[[Exception], ServiceError]] = {
    ValidationError: _invalid,
    AuthenticationError: _unauthorized,
    HttpError: _http_error,
    OperationalError: _unavailable,
    RequestDataTooBig: _too_big,
}

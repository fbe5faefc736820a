"""The API's own Django handler: agents' bearer-token requests skip the browser's middleware.

An agent's ``POST /api/v1/events`` needs none of what a browser's request does: no
session, no CSRF check (the API is token-authenticated, its operations CSRF-exempt), no
messages, no user, no static files, no login rate limit, no HTML 404 page. Through the
whole stack those cost about a third of a single-event POST's CPU (issue 32: whitenoise's
path lookup and the messages' cookie signer alone half of it). This handler is Django's,
with the same URLs and views, over ``API_MIDDLEWARE`` only: the security headers every
answer carries, and the API's JSON errors.

``for_api`` picks the handler per request in the servers' entry points
(``sagaboard.config.wsgi`` and ``.asgi``): a path under ``/api/`` with an
``Authorization: Bearer`` header. Everything else, the API docs page a browser opens
included, keeps the whole stack. Nothing under ``/api/`` reads the session or the user:
the token (``sagaboard.access.api.caller``) is the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler
from django.utils.module_loading import import_string

from sagaboard.infra.http.api_path import API_PREFIX

API_MIDDLEWARE = (
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "sagaboard.api.errors.api_errors_as_json",
)
"""The browser stack's (settings.MIDDLEWARE) headers and the JSON errors, in its order."""

_BEARER = b"bearer "


def is_api_call(path: str, authorization: bytes) -> bool:
    """Whether a request goes to the lean handler: an API path, a bearer token."""
    return path.startswith(API_PREFIX) and authorization[:7].lower() == _BEARER


class _OwnMiddleware(BaseHandler):
    """Django's handler over ``API_MIDDLEWARE`` instead of ``settings.MIDDLEWARE``.

    Django's ``load_middleware`` reads the setting; this is its loop over another list
    (the same adaptation between sync and async, the same hooks).
    """

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware: list[Callable[..., Any]] = []
        self._template_response_middleware: list[Callable[..., Any]] = []
        self._exception_middleware: list[Callable[..., Any]] = []
        get_response = self._get_response_async if is_async else self._get_response
        handler = convert_exception_to_response(get_response)
        handler_is_async = is_async
        for path in reversed(API_MIDDLEWARE):
            factory = import_string(path)
            can_sync = getattr(factory, "sync_capable", True)
            can_async = getattr(factory, "async_capable", False)
            middleware_is_async = can_async if handler_is_async or not can_sync else False
            adapted = self.adapt_method_mode(
                middleware_is_async, handler, handler_is_async, debug=settings.DEBUG, name=path
            )
            try:
                instance = factory(adapted)
            except MiddlewareNotUsed:
                continue
            if hasattr(instance, "process_view"):
                self._view_middleware.insert(
                    0, self.adapt_method_mode(is_async, instance.process_view)
                )
            if hasattr(instance, "process_template_response"):
                self._template_response_middleware.append(
                    self.adapt_method_mode(is_async, instance.process_template_response)
                )
            if hasattr(instance, "process_exception"):
                self._exception_middleware.append(
                    self.adapt_method_mode(False, instance.process_exception)
                )
            handler = convert_exception_to_response(instance)
            handler_is_async = middleware_is_async
        self._middleware_chain = self.adapt_method_mode(is_async, handler, handler_is_async)


class ApiWSGIHandler(_OwnMiddleware, WSGIHandler):
    """The lean handler under WSGI (gunicorn: the web processes)."""


class ApiASGIHandler(_OwnMiddleware, ASGIHandler):
    """The lean handler under ASGI (uvicorn: the embedded server, the live process)."""


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


def for_api_wsgi(browser: WSGIApp) -> WSGIApp:
    """A WSGI app sending bearer API calls to the lean handler, the rest to ``browser``."""
    api = ApiWSGIHandler()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        authorization = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        chosen = api if is_api_call(environ.get("PATH_INFO", ""), authorization) else browser
        return chosen(environ, start_response)

    return app


def for_api_asgi(browser: Callable[..., Any]) -> Callable[..., Any]:
    """The same choice for ASGI HTTP requests."""
    api = ApiASGIHandler()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        authorization = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
        chosen = api if is_api_call(scope.get("path", ""), authorization) else browser
        await chosen(scope, receive, send)

    return app

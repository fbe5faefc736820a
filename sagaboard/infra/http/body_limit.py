"""The API's body limit, enforced in front of Django (ASGI and WSGI), as the body arrives.

Django's own check (``DATA_UPLOAD_MAX_MEMORY_SIZE``) runs only once the view reads the
body, and under ASGI Django has spooled the whole upload to a temporary file by then:
a client could make every web process write gigabytes. Here an API request whose
``Content-Length`` is over ``SAGABOARD_API_MAX_BODY`` is answered 413 before any of its
body is read, and a chunked one as soon as the bytes received pass the limit; either way
in the API's error shape (docs/api.md) and before the request reaches any code that
could store something. ``WsgiBodyLimit`` does the same in front of the WSGI web
processes (gunicorn), which serve the API in production.
"""

from __future__ import annotations

import io
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from django.conf import settings

from sagaboard.infra.http.api_path import API_PREFIX

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: API bodies over the limit get a JSON 413 and never reach Django."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(API_PREFIX):
            await self.app(scope, receive, send)
            return
        limit = int(settings.SAGABOARD_API_MAX_BODY)
        if _declared_length(scope) > limit:
            await _too_large(send, limit)
            return
        # Read the body here (at most `limit` bytes are ever held), then hand it on.
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending its body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _too_large(send, limit)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay() -> Message:
            # The body once, then the client's own messages (a disconnect ends a long-poll).
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)


def _declared_length(scope: Scope) -> int:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0  # the server (h11, httptools) refuses a malformed length itself
    return 0


async def _too_large(send: Send, limit: int) -> None:
    body = _too_large_body(limit)
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class WsgiBodyLimit:
    """WSGI middleware: the same limit and the same 413 as ``BodyLimit``, for gunicorn.

    A declared length over the limit is refused before reading anything; a body without
    one (chunked) is read up to one byte past the limit, refused if it gets there, and
    otherwise handed to Django from memory with its now-known length.
    """

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if not environ.get("PATH_INFO", "").startswith(API_PREFIX):
            return self.app(environ, start_response)
        limit = int(settings.SAGABOARD_API_MAX_BODY)
        try:
            declared = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > limit:
            return _too_large_wsgi(start_response, limit)
        if not declared and "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
            body = environ["wsgi.input"].read(limit + 1)
            if len(body) > limit:
                return _too_large_wsgi(start_response, limit)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        return self.app(environ, start_response)


def _too_large_body(limit: int) -> bytes:
    return json.dumps(
        {
            "error": {
                "code": "payload_too_large",
                "message": f"the body is over {limit} bytes (SAGABOARD_API_MAX_BODY)",
            }
        }
    ).encode()


def _too_large_wsgi(start_response: Callable[..., Any], limit: int) -> list[bytes]:
    body = _too_large_body(limit)
    start_response(
        "413 Payload Too Large",
        [
            ("Content-Type", "application/json; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
        ],
    )
    return [body]

"""Agents' bearer-token API calls go through the API's own handler (sagaboard.api.handler).

What they must still get is what the whole stack gives an API answer: the same status,
the same JSON body, the same security headers; and nothing a browser's stack adds (a
session, a cookie). A browser's request under /api/ (the docs page) keeps the whole stack.
Both servers' entry points are driven as the servers drive them: WSGI (gunicorn) with an
environ, ASGI (uvicorn) with a scope.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.api.handler import is_api_call
from sagaboard.models import Event, Project
from tests.support.live_server import EventRecorder
from undo_core import Saga, define_tool

pytestmark = pytest.mark.django_db(transaction=True)

SECURITY_HEADERS = (
    "X-Content-Type-Options",
    "X-Frame-Options",
    "Referrer-Policy",
    "Cross-Origin-Opener-Policy",
    "Content-Security-Policy",
    "Strict-Transport-Security",
)


@pytest.fixture
def token() -> str:
    project = Project.objects.create(slug="shop", name="Shop")
    return token_create(project=project, label="lean").secret


def one_saga_body() -> bytes:
    recorder = EventRecorder()
    saga = Saga("lean", store=recorder)
    saga.execute(define_tool("charge", lambda i: {"ok": 1}, lambda o, i: None), {"n": 1})
    saga.complete()
    return json.dumps({"events": recorder.events}).encode()


def wsgi_call(
    method: str, path: str, body: bytes = b"", authorization: str = ""
) -> tuple[int, dict[str, str], bytes]:
    from sagaboard.config.wsgi import application

    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": "testserver",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "REMOTE_ADDR": "127.0.0.1",
    }
    if authorization:
        environ["HTTP_AUTHORIZATION"] = authorization
    started: list[Any] = []
    content = b"".join(
        application(environ, lambda status, headers, *_: started.append((status, headers)))
    )
    status, headers = started[0]
    return int(status.split()[0]), dict(headers), content


def whole_stack(method: str, path: str, body: bytes = b"", authorization: str = "") -> Any:
    """The same request through the browser's stack (the test client loads every middleware)."""
    extra = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    return Client().generic(method, path, body, content_type="application/json", **extra)


@pytest.mark.parametrize(
    ("method", "path", "body", "why"),
    [
        ("POST", "/api/v1/events", b'{"events": []}', "stored (nothing)"),
        ("GET", "/api/v1/nowhere", b"", "an API path no route has"),
        ("DELETE", "/api/v1/events", b"", "a method the path does not take"),
        ("POST", "/api/v1/events", b'{"events": [', "a body that is not JSON"),
        ("POST", "/api/v1/events", b'{"events": [{"type": "saga"}]}', "an invalid event"),
    ],
)
def test_a_bearer_call_is_answered_as_the_whole_stack_answers_it(
    token: str, method: str, path: str, body: bytes, why: str
) -> None:
    status, headers, content = wsgi_call(method, path, body, f"Bearer {token}")
    expected = whole_stack(method, path, body, f"Bearer {token}")
    assert status == expected.status_code, why
    assert json.loads(content) == json.loads(expected.content), why
    for name in SECURITY_HEADERS:
        assert headers.get(name) == expected.headers.get(name), (why, name)
    assert headers.get("Allow") == expected.headers.get("Allow"), why


def test_a_refused_token_is_answered_401_in_the_api_shape(token: str) -> None:
    status, headers, content = wsgi_call(
        "POST", "/api/v1/events", b'{"events": []}', "Bearer sgb_x"
    )
    assert status == 401
    assert json.loads(content)["error"]["code"] == "unauthorized"
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_a_bearer_call_stores_its_events_and_sets_no_cookie(token: str) -> None:
    status, headers, content = wsgi_call(
        "POST", "/api/v1/events", one_saga_body(), f"Bearer {token}"
    )
    assert status == 200, content
    assert Event.objects.count() == 4
    assert "Set-Cookie" not in headers
    assert "Cookie" not in headers.get("Vary", "")


def test_the_docs_page_a_browser_opens_keeps_the_whole_stack() -> None:
    status, headers, content = wsgi_call("GET", "/api/v1/docs")
    assert status == 200
    assert b"<html" in content.lower()
    assert "Content-Security-Policy" in headers


@pytest.mark.asyncio
async def test_under_asgi_a_bearer_call_is_stored_and_answered_as_json(token: str) -> None:
    from sagaboard.config.asgi import application

    body = one_saga_body()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/events",
        "raw_path": b"/api/v1/events",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", f"Bearer {token}".encode()),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    app = ApplicationCommunicator(application, scope)
    await app.send_input({"type": "http.request", "body": body, "more_body": False})
    start = await app.receive_output(10)
    answer = await app.receive_output(10)
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    assert start["status"] == 200, answer
    assert len(json.loads(answer["body"])["results"]) == 4
    assert await Event.objects.acount() == 4
    assert headers["X-Frame-Options"] == "DENY"
    assert "Set-Cookie" not in headers


@pytest.mark.parametrize(
    ("path", "authorization", "lean"),
    [
        ("/api/v1/events", b"Bearer sgb_x", True),
        ("/api/v1/events", b"bearer sgb_x", True),  # the scheme is case-insensitive (RFC 9110)
        ("/api/v1/events", b"", False),  # no token: the whole stack answers 401 the same way
        ("/api/v1/docs", b"", False),  # the docs page, in a browser
        ("/api/v1/events", b"Basic dTpw", False),
        ("/sagas/", b"Bearer sgb_x", False),  # a page: never lean, whatever the header
    ],
)
def test_only_bearer_calls_under_the_api_take_the_lean_handler(
    path: str, authorization: bytes, lean: bool
) -> None:
    assert is_api_call(path, authorization) is lean

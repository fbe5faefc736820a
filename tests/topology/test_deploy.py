"""The production serving pieces: the proxy config the docs ship, the Procfile, the WSGI entry.

deploy/nginx.conf must send ``/ws/`` (upgraded) to the live process and everything else
to the web processes; checked with the real nginx in front of two stand-in upstreams that
say who they are and what headers they got. The Procfile's ``web`` and ``live`` commands
must start and answer as written. The WSGI entry point must keep the API's body limit
(the ASGI one has ``BodyLimit``) and must never start a live relay.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.live_server import (
    NGINX,
    NGINX_CONF,
    ROOT,
    Proxy,
    free_port,
    prepare,
    render_nginx_site,
    temp_database,
)

needs_nginx = pytest.mark.skipif(
    not Path(NGINX).exists(), reason=f"{NGINX} missing: .ci/run installs Debian's nginx"
)


# ---------------------------------------------------------------- the proxy config


def test_the_rendered_proxy_config_differs_from_the_shipped_one_only_in_its_addresses() -> None:
    shipped = NGINX_CONF.read_text()
    rendered = render_nginx_site([5001, 5002], [5101], 5999)
    assert "server 127.0.0.1:5001;\n    server 127.0.0.1:5002;" in rendered
    assert "server 127.0.0.1:5101;" in rendered and "listen 127.0.0.1:5999;" in rendered
    address = re.compile(r"^\s*(server 127\.0\.0\.1:\d+|listen [\d.:]+);\n", re.M)
    assert address.sub("", shipped) == address.sub("", rendered)


def test_the_shipped_proxy_config_upgrades_websockets_and_outlasts_the_pings() -> None:
    text = NGINX_CONF.read_text()
    ws = text[text.index("location /ws/") : text.index("location / {")]
    assert "proxy_pass http://sagaboard_live;" in ws
    assert "proxy_http_version 1.1;" in ws
    assert "proxy_set_header Upgrade $http_upgrade;" in ws
    assert 'proxy_set_header Connection "upgrade";' in ws
    timeout = int(re.search(r"proxy_read_timeout (\d+)s;", ws).group(1))  # type: ignore[union-attr]
    procfile = (ROOT / "Procfile").read_text()
    ping = int(re.search(r"--ws-ping-interval (\d+)", procfile).group(1))  # type: ignore[union-attr]
    assert ping * 2 < timeout  # an idle feed is pinged twice before nginx would close it


class _Upstream(BaseHTTPRequestHandler):
    """Answers every request with the server's name, the path and the headers it got."""

    protocol_version = "HTTP/1.1"
    name = ""

    def do_GET(self) -> None:
        body = json.dumps(
            {
                "who": self.server.name,  # type: ignore[attr-defined]
                "path": self.path,
                "version": self.request_version,
                "headers": {k.lower(): v for k, v in self.headers.items()},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def _upstream(name: str) -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Upstream)
    server.name = name  # type: ignore[attr-defined]
    server.port = server.server_address[1]  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
@needs_nginx
def test_nginx_with_the_shipped_config_sends_ws_to_live_and_the_rest_to_web(
    tmp_path: Path,
) -> None:
    with _upstream("web") as web, _upstream("live") as live:
        proxy = Proxy(tmp_path, web=[web], live=[live])
        with proxy, httpx.Client(base_url=proxy.url, timeout=10, trust_env=False) as http:
            for path in ("/", "/api/v1/events", "/sagas/", "/static/app.css", "/healthz"):
                got = http.get(path).json()
                assert (got["who"], got["path"]) == ("web", path)
                assert got["headers"]["host"] == f"127.0.0.1:{proxy.port}"  # port kept
                assert got["headers"]["x-forwarded-proto"] == "http"
            upgrade = {"Upgrade": "websocket", "Connection": "Upgrade"}
            got = http.get("/ws/sagas/?list=1", headers=upgrade).json()
            assert (got["who"], got["path"], got["version"]) == (
                "live", "/ws/sagas/?list=1", "HTTP/1.1",
            )  # fmt: skip
            assert got["headers"]["upgrade"] == "websocket"
            assert got["headers"]["connection"] == "upgrade"
            assert got["headers"]["host"] == f"127.0.0.1:{proxy.port}"  # the Origin check's


# ---------------------------------------------------------------- the Procfile


def _procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip() and not line.startswith("#"))


def test_the_procfile_serves_http_over_wsgi_and_websockets_over_asgi() -> None:
    procs = _procfile()
    assert procs["web"].startswith("gunicorn -c python:sagaboard.config.gunicorn ")
    assert procs["web"].endswith("sagaboard.config.wsgi:application")
    assert procs["live"].startswith("uvicorn sagaboard.config.asgi:application ")
    assert {"release", "web", "live", "worker", "beat"} == set(procs)


@pytest.mark.slow
@pytest.mark.parametrize("process", ["web", "live"])
def test_the_procfile_process_starts_and_answers(process: str, tmp_path: Path) -> None:
    with temp_database("sqlite", tmp_path) as url:
        prepare(url)
        port = free_port()
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "DATABASE_URL": url,
            "PORT": str(port),
            "LIVE_PORT": str(port),
            "WEB_CONCURRENCY": "1",
            "SAGABOARD_DEBUG": "0",
            "SAGABOARD_SECRET_KEY": "procfile-test-only-not-secret-0123456789abcdef",
            "SAGABOARD_ALLOWED_HOSTS": "127.0.0.1",
            "REDIS_URL": "",
        }
        command = _procfile()[process]
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {command}"], cwd=ROOT, env=env, start_new_session=True
        )
        try:
            deadline, status = time.monotonic() + 40, None
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    url_ = f"http://127.0.0.1:{port}/api/v1/openapi.json"
                    status = httpx.get(url_, timeout=2, trust_env=False).status_code
                    break
                except httpx.TransportError:
                    time.sleep(0.2)
            assert proc.poll() is None, f"{shlex.quote(command)} exited with {proc.returncode}"
            assert status == 200
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


# ---------------------------------------------------------------- the WSGI entry point


def _call(app: Any, path: str, body: bytes, *, chunked: bool) -> tuple[str, bytes, bytes]:
    """Call a WSGI app; (status, response body, what the inner app read)."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "wsgi.input": io.BytesIO(body),
    }
    if chunked:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
    else:
        environ["CONTENT_LENGTH"] = str(len(body))
    seen: list[str] = []
    out = b"".join(app(environ, lambda status, headers: seen.append(status)))
    return seen[0], out, getattr(app, "read", b"")


class _Inner:
    """Stands for Django: reads the body as Django would (CONTENT_LENGTH bytes)."""

    def __init__(self) -> None:
        self.read: bytes | None = None

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        self.read = environ["wsgi.input"].read(length)
        start_response("200 OK", [])
        return [b"ok"]


def test_wsgi_api_bodies_over_the_limit_get_the_apis_413_before_django(settings: Any) -> None:
    from sagaboard.infra.http.body_limit import WsgiBodyLimit

    settings.SAGABOARD_API_MAX_BODY = 10
    for chunked in (False, True):
        inner = _Inner()
        status, out, _ = _call(WsgiBodyLimit(inner), "/api/v1/events", b"x" * 11, chunked=chunked)
        assert status.startswith("413") and inner.read is None
        assert json.loads(out)["error"]["code"] == "payload_too_large"


def test_wsgi_a_chunked_body_within_the_limit_reaches_django_whole(settings: Any) -> None:
    from sagaboard.infra.http.body_limit import WsgiBodyLimit

    settings.SAGABOARD_API_MAX_BODY = 10
    inner = _Inner()
    status, _, _ = _call(WsgiBodyLimit(inner), "/api/v1/events", b"0123456789", chunked=True)
    assert status.startswith("200") and inner.read == b"0123456789"
    page = _Inner()  # not the API: untouched (Django's own limits apply)
    status, _, _ = _call(WsgiBodyLimit(page), "/login/", b"x" * 50, chunked=False)
    assert status.startswith("200") and page.read == b"x" * 50


@pytest.mark.django_db
def test_the_wsgi_entry_point_serves_the_api_and_never_starts_a_relay(settings: Any) -> None:
    from sagaboard.config.wsgi import application
    from sagaboard.live import relay

    settings.ALLOWED_HOSTS = ["testserver"]
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/api/v1/openapi.json",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": "testserver",
        "wsgi.input": io.BytesIO(b""),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
    }
    seen: list[str] = []
    body = b"".join(application(environ, lambda status, headers: seen.append(status)))
    assert seen[0].startswith("200") and b'"openapi"' in body
    assert not relay._relays  # the relay starts only with a websocket (the live process)


def _peer(app: Any, peer: str, forwarded: str | None) -> str:
    environ: dict[str, Any] = {"REMOTE_ADDR": peer}
    if forwarded is not None:
        environ["HTTP_X_FORWARDED_FOR"] = forwarded
    seen: dict[str, str] = {}

    def inner(env: dict[str, Any], start_response: Any) -> list[bytes]:
        seen["addr"] = env["REMOTE_ADDR"]
        return []

    app(inner)(environ, lambda *a: None)
    return seen["addr"]


def test_behind_the_proxy_the_client_address_is_the_one_nginx_saw() -> None:
    from sagaboard.infra.http.forwarded import ProxiedAddress

    def app(inner: Any) -> Any:
        return ProxiedAddress(inner, trusted=["127.0.0.1", "::1"])

    assert _peer(app, "127.0.0.1", "203.0.113.7") == "203.0.113.7"
    # A client's own header is kept by nginx ($proxy_add_x_forwarded_for appends the peer):
    # only the right-most untrusted entry counts, so it cannot pick its address.
    assert _peer(app, "127.0.0.1", "10.9.9.9, 203.0.113.7") == "203.0.113.7"
    # Not from the proxy: the header is the client's own, ignored.
    assert _peer(app, "198.51.100.2", "203.0.113.7") == "198.51.100.2"
    assert _peer(app, "127.0.0.1", None) == "127.0.0.1"

"""The live feed's Origin check: the page must be the dashboard, scheme, host and port.

The same rule Django applies to form posts (the request's own origin, or one of
``CSRF_TRUSTED_ORIGINS``), for the websocket handshake; refused ones are closed with
4403 (what a raw client sees is tested against uvicorn in test_live_cluster.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from sagaboard.live.access import origin_allowed

DASHBOARD = {"ALLOWED_HOSTS": ["host", "other.example"], "CSRF_TRUSTED_ORIGINS": []}
ORIGINS = [
    # (origin, Host header, websocket scheme, extra settings, admitted)
    ("http://host:8000", "host:8000", "ws", {}, True),
    ("HTTP://HOST:8000", "host:8000", "ws", {}, True),  # scheme and host are case-blind
    ("http://host", "host:80", "ws", {}, True),  # the default port, written or not
    ("http://evil:8000", "host:8000", "ws", {}, False),
    ("https://host:9999", "host:8000", "ws", {}, False),
    ("https://host:8000", "host:8000", "ws", {}, False),  # another scheme
    ("http://host:8001", "host:8000", "ws", {}, False),  # another port
    ("http://host", "host:8000", "ws", {}, False),
    ("http://other.example:8000", "host:8000", "ws", {}, False),  # allowed, not the page's
    ("http://evil:8000", "evil:8000", "ws", {}, False),  # a Host outside ALLOWED_HOSTS
    ("null", "host:8000", "ws", {}, False),  # a sandboxed frame or a file
    ("http://host:8000/path", "host:8000", "ws", {}, False),  # not an origin
    ("https://host", "host", "wss", {}, True),  # TLS to the server itself
    ("http://host", "host", "wss", {}, False),
    ("https://host", "host", "ws", {"SAGABOARD_HTTPS": True}, True),  # TLS ends at the proxy
    ("http://host", "host", "ws", {"SAGABOARD_HTTPS": True}, False),
    ("https://dash.example", "10.0.0.5:8000", "ws",
     {"CSRF_TRUSTED_ORIGINS": ["https://dash.example"]}, True),  # a proxy that rewrites Host
    ("http://dash.example", "10.0.0.5:8000", "ws",
     {"CSRF_TRUSTED_ORIGINS": ["https://dash.example"]}, False),
    ("https://a.dash.example", "host", "ws",
     {"CSRF_TRUSTED_ORIGINS": ["https://*.dash.example"]}, True),
    ("https://a.evil.example", "host", "ws",
     {"CSRF_TRUSTED_ORIGINS": ["https://*.dash.example"]}, False),
]  # fmt: skip


@pytest.mark.parametrize(("origin", "host", "scheme", "extra", "admitted"), ORIGINS)
def test_the_origin_must_be_the_dashboards_scheme_host_and_port(
    origin: str, host: str, scheme: str, extra: dict[str, Any], admitted: bool
) -> None:
    scope = {"type": "websocket", "scheme": scheme,
             "headers": [(b"origin", origin.encode()), (b"host", host.encode())]}  # fmt: skip
    with override_settings(**{**DASHBOARD, **extra}):
        assert origin_allowed(scope) is admitted


def test_a_handshake_without_an_origin_is_refused() -> None:
    with override_settings(**DASHBOARD):
        assert not origin_allowed({"type": "websocket", "headers": [(b"host", b"host")]})

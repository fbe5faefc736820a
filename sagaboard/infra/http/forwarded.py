"""The client's address behind the proxy, for the WSGI web processes (gunicorn).

Login rate limits count failures per ``REMOTE_ADDR`` (docs/security.md). Behind nginx
every request comes from the proxy, so without this every client would share one count.
uvicorn's ``--proxy-headers`` does this for the ASGI process; gunicorn does not (its
``forwarded_allow_ips`` only trusts the scheme headers), so the same rule is here: when
the peer is a trusted proxy (``FORWARDED_ALLOW_IPS``, default the loopback addresses, as
uvicorn's), the client is the right-most ``X-Forwarded-For`` entry that is not itself a
trusted proxy. A client's own ``X-Forwarded-For`` (sent to the proxy, which appends the
real peer) cannot choose its address: only entries right of it are believed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def trusted_proxies() -> frozenset[str]:
    raw = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
    return frozenset(a.strip() for a in raw.split(",") if a.strip())


class ProxiedAddress:
    """WSGI middleware: ``REMOTE_ADDR`` is the client's, not the trusted proxy's."""

    def __init__(self, app: WSGIApp, trusted: Iterable[str] | None = None) -> None:
        self.app = app
        self.trusted = frozenset(trusted) if trusted is not None else trusted_proxies()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        peer = environ.get("REMOTE_ADDR", "")
        forwarded = environ.get("HTTP_X_FORWARDED_FOR", "")
        if forwarded and ("*" in self.trusted or peer in self.trusted):
            hops = [h.strip() for h in forwarded.split(",") if h.strip()]
            for hop in reversed(hops):
                if hop not in self.trusted:
                    environ["REMOTE_ADDR"] = hop
                    break
            else:
                if hops:
                    environ["REMOTE_ADDR"] = hops[0]
        return self.app(environ, start_response)

"""A webhook receiver on a local port: what sagaboard's notifications (and webhook undos) reach."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any


class Receiver:
    """A local webhook receiver that answers with the queued status codes."""

    def __init__(self) -> None:
        self.bodies: list[tuple[dict[str, Any], str]] = []
        self.statuses: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["content-length"]))
                receiver.bodies.append((json.loads(raw), self.headers["x-sagaboard-signature"]))
                receiver.raw = raw
                self.send_response(receiver.statuses.pop(0) if receiver.statuses else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

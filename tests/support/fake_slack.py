"""A local stand-in for Slack: it signs interaction requests exactly as Slack does and
receives what sagaboard posts to an interaction's ``response_url``.

Slack's recipe (api.slack.com/authentication/verifying-requests-from-slack): the body is
form-encoded ``payload=<JSON>``; ``X-Slack-Request-Timestamp`` is the Unix time of sending;
``X-Slack-Signature`` is ``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{body}`` keyed with
the app's signing secret. Written here on its own (not with sagaboard's code), so a mistake
in one is not repeated in the other.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import urlencode

from django.test import Client

from sagaboard.models import Notification
from sagaboard.notify.services import notifications

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


class FakeSlack:
    """Clicks buttons as Slack would send them; ``posted``: what reached the response_url."""

    def __init__(self, secret: str = SECRET) -> None:
        self.secret = secret
        self.posted: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["content-length"]))
                fake.posted.append(json.loads(raw))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def sign(self, body: bytes, timestamp: str, secret: str | None = None) -> str:
        base = f"v0:{timestamp}:".encode() + body
        key = (secret or self.secret).encode()
        return "v0=" + hmac.new(key, base, hashlib.sha256).hexdigest()

    def payload(self, user_id: str, action_id: str, approval: int) -> dict[str, Any]:
        """A ``block_actions`` interaction: one button of the approval message clicked."""
        return {
            "type": "block_actions",
            "user": {"id": user_id, "username": user_id.lower(), "team_id": "T0001"},
            "team": {"id": "T0001", "domain": "shop"},
            "channel": {"id": "C0001", "name": "undos"},
            "response_url": f"{self.base}actions/T0001/{approval}/{time.time_ns()}",
            "trigger_id": f"{time.time_ns()}.trigger",
            "actions": [
                {
                    "type": "button",
                    "action_id": action_id,
                    "block_id": f"sagaboard-approval-{approval}",
                    "value": str(approval),
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }

    def body(self, payload: dict[str, Any]) -> bytes:
        return urlencode({"payload": json.dumps(payload)}).encode()

    def send(
        self,
        client: Client,
        body: bytes,
        *,
        timestamp: str | None = None,
        signature: str | None = None,
    ) -> Any:
        """POST ``body`` to the endpoint, signed now (or with the given timestamp/signature)."""
        ts = timestamp or str(int(time.time()))
        return client.post(
            "/slack/interactions",
            body,
            content_type="application/x-www-form-urlencoded",
            headers={
                "X-Slack-Request-Timestamp": ts,
                "X-Slack-Signature": signature or self.sign(body, ts),
            },
        )

    def click(self, client: Client, user_id: str, decision: str, approval: int) -> Any:
        action = notifications.APPROVE if decision == "approve" else notifications.REJECT
        return self.send(client, self.body(self.payload(user_id, action, approval)))

    def deliver(self) -> list[dict[str, Any]]:
        """Run the outbox once (as the worker would); what reached Slack since the last call."""
        seen = len(self.posted)
        for pk in Notification.objects.filter(
            delivered_at__isnull=True, kind="slack.response"
        ).values_list("pk", flat=True):
            assert notifications.notification_send(pk)
        return self.posted[seen:]

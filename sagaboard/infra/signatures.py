"""The signature on what sagaboard posts to a webhook (an undo's or a notification's).

``x-sagaboard-signature: sha256=<hex>``: the HMAC-SHA256 of the exact body sent, keyed
with ``SAGABOARD_WEBHOOK_SECRET``, so a receiver can tell the post is sagaboard's.
"""

from __future__ import annotations

import hashlib
import hmac


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()

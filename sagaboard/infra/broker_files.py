"""The embedded broker: kombu's filesystem transport, each message written whole before it shows.

kombu's filesystem transport creates a message file under its final name, then
writes it. A worker polling in between moves the still-empty file away, fails to
decode it and stops ("Unrecoverable error: JSONDecodeError"), and the message is
gone. The approval benchmark hit this within a few dozen messages once the worker
polled every 50 ms. Here a message is written under a name no worker looks for
(``.part`` after the queue's ``.msg``) and renamed into place: a rename within a
folder is atomic, so a worker sees the whole message or nothing.

Selected by ``CELERY_BROKER_TRANSPORT`` in sagaboard/config/settings.py when the broker
is ``filesystem://``.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Put ``payload`` on ``queue``: named as kombu names it, visible only once written."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = f"{final}.part"  # kombu's readers match "<queue>.msg" exactly: skipped
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel

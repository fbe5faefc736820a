"""A worker's sign of life: a row written every few seconds while it runs (/healthz reads it)."""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

from celery.signals import worker_ready
from django.db import connection

from sagaboard.health.services.health import worker_heartbeat

HEARTBEAT_SECONDS = 15.0


@worker_ready.connect
def start_heartbeat(sender: Any = None, **kwargs: Any) -> None:
    """Start the heartbeat thread once the worker is ready to take tasks."""
    name = f"{getattr(sender, 'hostname', None) or socket.gethostname()}:{os.getpid()}"

    def beat() -> None:
        while True:
            try:
                worker_heartbeat(name)
            except Exception:  # the database blinked: try again next time
                logging.getLogger("sagaboard.worker").exception("heartbeat not written")
            finally:
                connection.close()
            threading.Event().wait(HEARTBEAT_SECONDS)

    threading.Thread(target=beat, name="sagaboard-heartbeat", daemon=True).start()

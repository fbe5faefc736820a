"""The Celery app: compensations, retries, notifications and the periodic sweep run here.

Start a worker with ``celery -A sagaboard worker -B`` (``-B``: the sweep's beat, in
one process for the embedded default; run ``celery -A sagaboard beat`` once in
production instead).
"""

import logging
import os
import socket
import threading
from typing import Any

from celery import Celery
from celery.schedules import crontab
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sagaboard.settings")

app = Celery("sagaboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.conf.beat_schedule = {
    "sweep": {"task": "sagaboard.tasks.sweep", "schedule": 10.0},
    # Data retention (SAGABOARD_RETENTION_DAYS): daily, at a quiet hour (UTC).
    "retention": {
        "task": "sagaboard.tasks.retention_sweep",
        "schedule": crontab(hour=3, minute=30),
    },
}


HEARTBEAT_SECONDS = 15.0


@worker_ready.connect
def _start_heartbeat(sender: Any = None, **kwargs: Any) -> None:
    """A sign of life every few seconds while this worker runs (/healthz reads it)."""
    name = f"{getattr(sender, 'hostname', None) or socket.gethostname()}:{os.getpid()}"

    def beat() -> None:
        from django.db import connection

        from sagaboard.health import worker_heartbeat

        while True:
            try:
                worker_heartbeat(name)
            except Exception:  # the database blinked: try again next time
                logging.getLogger("sagaboard.worker").exception("heartbeat not written")
            finally:
                connection.close()
            threading.Event().wait(HEARTBEAT_SECONDS)

    threading.Thread(target=beat, name="sagaboard-heartbeat", daemon=True).start()

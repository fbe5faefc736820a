"""The Celery app: compensations, retries, notifications and the periodic sweep run here.

Start a worker with ``celery -A sagaboard worker -B`` (``-B``: the sweep's beat, in
one process for the embedded default; run ``celery -A sagaboard beat`` once in
production instead). The tasks and the worker's heartbeat live in ``sagaboard.worker``;
the task names are ``sagaboard.infra.jobs``'s, and ``CELERY_IMPORTS`` (settings) loads both.
"""

import os
from typing import Any

from celery import Celery
from celery.schedules import crontab
from django.conf import settings

from sagaboard.infra import jobs

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sagaboard.config.settings")

app = Celery("sagaboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.beat_schedule = {
    "sweep": {"task": jobs.SWEEP, "schedule": 10.0},
    # Data retention (SAGABOARD_RETENTION_DAYS): daily, at a quiet hour (UTC).
    "retention": {
        "task": jobs.RETENTION_SWEEP,
        "schedule": crontab(hour=3, minute=30),
    },
}


@app.on_after_configure.connect
def _rollup_schedule(sender: Celery, **kwargs: Any) -> None:
    """Per-tool health: fold the sagas changed since the last run every
    SAGABOARD_ROLLUP_SECONDS. Added once the settings are loaded (they import this
    package, so this module cannot read them while it is imported)."""
    sender.conf.beat_schedule["tool-rollup"] = {
        "task": jobs.TOOL_ROLLUP_FOLD,
        "schedule": settings.SAGABOARD_ROLLUP_SECONDS,
    }

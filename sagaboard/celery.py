"""The Celery app: compensations, retries, notifications and the periodic sweep run here.

Start a worker with ``celery -A sagaboard worker -B`` (``-B``: the sweep's beat, in
one process for the embedded default; run ``celery -A sagaboard beat`` once in
production instead).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sagaboard.settings")

app = Celery("sagaboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.conf.beat_schedule = {
    "sweep": {"task": "sagaboard.tasks.sweep", "schedule": 10.0},
}

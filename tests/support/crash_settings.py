"""sagaboard's settings for the worker-crash test: its own Celery queue on a shared Redis.

Workers, the beat and the shell that requests the rollback all send to and read from
``SAGABOARD_TEST_QUEUE``, so a test run never takes (or leaves) another run's tasks.
"""

import os

from sagaboard.config.settings import *  # noqa: F403

CELERY_TASK_DEFAULT_QUEUE = os.environ.get("SAGABOARD_TEST_QUEUE", "celery")

"""sagaboard's settings for the topology test: a Celery queue of the run's own.

``SAGABOARD_REDIS_PREFIX`` names the relay's keys and the channel layer's channels,
but not Celery's queue (``celery`` on the broker's database, whatever the prefix: see
``test_every_redis_name_carries_the_installation_prefix``). Web processes, workers
and the beat of one run send to and read from ``SAGABOARD_TEST_QUEUE`` only, so a
run never takes (or leaves) another run's tasks.
"""

import os

from sagaboard.config.settings import *  # noqa: F403

CELERY_TASK_DEFAULT_QUEUE = os.environ.get("SAGABOARD_TEST_QUEUE", "celery")
# No pidbox (remote control) queues or fanout channels in Redis: nothing here uses them.
CELERY_WORKER_ENABLE_REMOTE_CONTROL = False

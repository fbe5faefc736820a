"""sagaboard's settings for the approval benchmark: its probes, and a broker of the run's own.

* ``CELERY_IMPORTS``: the worker also loads ``benchmarks.approval_probes`` (the no-op
  floor task, the stamping undo handler, the task signals) when it starts.
* ``SAGABOARD_BENCH_QUEUE_DIR``: the filesystem broker's folders for this run only
  (the default ``var/celery-queue`` is shared by every run of this checkout).
* ``SAGABOARD_BENCH_FS_POLLING``: the filesystem transport's polling interval, to
  measure another value than the product's (the "before" of a change).
"""

import os

from sagaboard.config.settings import *  # noqa: F403
from sagaboard.config.settings import (
    CELERY_BROKER_TRANSPORT_OPTIONS,
    CELERY_BROKER_URL,
    CELERY_IMPORTS,
)

CELERY_IMPORTS = [*CELERY_IMPORTS, "benchmarks.approval_probes"]

if CELERY_BROKER_URL == "filesystem://" and os.environ.get("SAGABOARD_BENCH_QUEUE_DIR"):
    _dir = os.environ["SAGABOARD_BENCH_QUEUE_DIR"]
    os.makedirs(_dir, exist_ok=True)
    os.makedirs(f"{_dir}-control", exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        **CELERY_BROKER_TRANSPORT_OPTIONS,
        "data_folder_in": _dir,
        "data_folder_out": _dir,
        "control_folder": f"{_dir}-control",
    }
    if os.environ.get("SAGABOARD_BENCH_FS_POLLING"):
        CELERY_BROKER_TRANSPORT_OPTIONS["polling_interval"] = float(
            os.environ["SAGABOARD_BENCH_FS_POLLING"]
        )

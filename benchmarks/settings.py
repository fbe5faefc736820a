"""sagaboard's settings plus the benchmark floor view (never used in production)."""

from sagaboard.config.settings import *  # noqa: F403

ROOT_URLCONF = "benchmarks.urls"

"""Shared pytest configuration for the whole suite.

Tests run with `--import-mode=importlib` and without `__init__.py` files, so test modules in
different folders may share a name. Django settings come from `sagaboard.settings`
(see `[tool.pytest.ini_options]` in pyproject.toml); DATABASE_URL picks the database.
"""

import sys
from pathlib import Path

import pytest

# Helper modules that sit beside the tests (tests/sagaboard/agent_runs.py) import by name.
sys.path.insert(0, str(Path(__file__).parent / "sagaboard"))
sys.path.insert(0, str(Path(__file__).parent / "e2e"))  # tests/e2e/chromium.py
sys.path.insert(0, str(Path(__file__).parent / "security"))  # tests/security/permission_matrix.py


@pytest.fixture(autouse=True)
def _rate_limit_counts_start_at_zero() -> None:
    """Rate-limit counters (sagaboard.rate_limits) live in the cache, which in one test
    process outlives a test: each test starts with none, or a suite's wrong passwords and
    bad tokens would add up to a 429 in an unrelated test. Local-memory cache only: a
    Redis cache is shared with others and never flushed here."""
    if "django.core.cache" not in sys.modules:  # the Django-free suites
        return
    from django.core.cache import caches
    from django.core.cache.backends.locmem import LocMemCache

    if isinstance(caches["default"], LocMemCache):
        caches["default"].clear()

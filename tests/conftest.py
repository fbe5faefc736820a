"""Shared pytest configuration for the whole suite.

Tests run with `--import-mode=importlib` and without `__init__.py` files, so test modules in
different folders may share a name. Django settings come from `sagaboard.settings`
(see `[tool.pytest.ini_options]` in pyproject.toml); DATABASE_URL picks the database.
"""

import sys
from pathlib import Path

# Helper modules that sit beside the tests (tests/sagaboard/agent_runs.py) import by name.
sys.path.insert(0, str(Path(__file__).parent / "sagaboard"))
sys.path.insert(0, str(Path(__file__).parent / "e2e"))  # tests/e2e/chromium.py
sys.path.insert(0, str(Path(__file__).parent / "security"))  # tests/security/fuzz_data.py

"""Shared pytest configuration for the whole suite.

Tests run with `--import-mode=importlib` and without `__init__.py` files, so test modules in
different folders may share a name. Django settings come from `sagaboard.settings`
(see `[tool.pytest.ini_options]` in pyproject.toml); DATABASE_URL picks the database.
"""

"""Fixtures of the ``undo-mcp`` tests; the client helpers are in ``undo_mcp_harness``."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession

from tests.support.undo_mcp_harness import Connect, mcp_session


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Where the server runs (and so where its undo commands run)."""
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def connect(tmp_path: Path, workdir: Path) -> Connect:
    """``connect(*extra_args)``: a standalone server on this test's SQLite file."""
    db = tmp_path / "sagas.sqlite3"

    def open_session(*extra: str) -> AbstractAsyncContextManager[ClientSession]:
        return mcp_session("--db", str(db), *extra, cwd=workdir)

    return open_session

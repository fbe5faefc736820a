"""Run a benchmark module (or one part of it) in a process of its own and collect its figures.

Django is set up once per process, for one database: a module that measures on
SQLite and on PostgreSQL (or with two brokers) runs each part in a child, which
hands its figures back through ``--json`` (``benchmarks.report``).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.report import Figure, load
from tests.support.live_server import ROOT


def figures_of(module: str, argv: list[str], *, timeout: float) -> list[Figure]:
    """``python -m module *argv --json F`` (stdout discarded, stderr shown); F's figures."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        subprocess.run(
            [sys.executable, "-m", module, *argv, "--json", str(out)],
            cwd=ROOT, stdout=subprocess.DEVNULL, timeout=timeout, check=True,
        )  # fmt: skip
        return load(out)

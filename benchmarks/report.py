"""What every benchmark module reports, and how ``python -m benchmarks`` writes and checks it.

Each module (``benchmarks.engine``, ``.ingest``, ...) measures its figures several
times in one process and hands back :class:`Figure` objects: the samples of one
figure and, measured in the same runs, the samples of its *floor* (the plainest
thing that does the same work: bare calls, a raw commit, a one-INSERT view, a
bare ``group_send``). The ratio to the floor is what holds across machines, so it
is what the published table leads with and what the CI regression check compares.

A module run on its own prints a table; with ``--json PATH`` it also writes its
figures there for the runner (``benchmarks/__main__.py``), which runs each module
in its own process (each sets up Django its own way) and writes
``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal


@dataclass(frozen=True)
class Aim:
    """A published goal: ``on`` the figure's median value or its ratio to the floor."""

    text: str  # as the issue words it, e.g. "p99 < 250 ms at 200 clients"
    on: Literal["value", "ratio"]
    op: Literal["<=", ">="]
    bound: float

    def met(self, value: float, ratio: float | None) -> bool | None:
        subject = value if self.on == "value" else ratio
        if subject is None:
            return None
        return subject <= self.bound if self.op == "<=" else subject >= self.bound


@dataclass
class Figure:
    """One measured figure: a sample per run, and its floor's sample from the same run."""

    key: str  # stable across runs and machines: the regression check matches on it
    group: str  # table section: "Engine", "Ingestion", "Live updates", ...
    label: str
    unit: str  # "us/step", "events/s", "ms", "MiB"
    samples: list[float]
    better: Literal["lower", "higher"] = "lower"
    floor_label: str = ""
    floor_samples: list[float] = field(default_factory=list)
    aim: Aim | None = None
    queries: int | None = None  # SQL queries per request, where that is the point
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def floor(self) -> float | None:
        return statistics.median(self.floor_samples) if self.floor_samples else None

    def ratios(self) -> list[float]:
        """Per-run ratios: each run's figure over the same run's floor."""
        pairs = zip(self.samples, self.floor_samples, strict=False)
        return [value / floor for value, floor in pairs if floor]

    @property
    def ratio(self) -> float | None:
        ratios = self.ratios()
        return statistics.median(ratios) if ratios else None

    def met(self) -> bool | None:
        return self.aim.met(self.median, self.ratio) if self.aim else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Figure:
        aim = Aim(**data["aim"]) if data.get("aim") else None
        return cls(**{**data, "aim": aim})


def spread(samples: list[float]) -> str:
    """min-max of the runs, so a reader sees how much one run can be trusted."""
    if len(samples) < 2:
        return "1 run"
    return f"{fmt(min(samples))}-{fmt(max(samples))}"


def fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cli(description: str) -> argparse.ArgumentParser:
    """The options every module takes, so the runner can drive them all the same way."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (default 5)")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, for CI's regression check"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    return parser


def emit(figures: list[Figure], json_path: Path | None) -> None:
    """Print the module's figures as a table; write them as JSON when asked."""
    print(f"{'figure':<52} {'median':>10} {'unit':<9} {'spread':>19} {'x floor':>8}  aim")
    for f in figures:
        ratio = "" if f.ratio is None else f"{f.ratio:.2f}"
        met = f.met()
        verdict = "" if met is None else ("met" if met else "MISSED")
        q = "" if f.queries is None else f" [{f.queries} q]"
        print(
            f"{f.label + q:<52} {fmt(f.median):>10} {f.unit:<9} {spread(f.samples):>19}"
            f" {ratio:>8}  {verdict}"
        )
    if json_path is not None:
        json_path.write_text(json.dumps([f.to_dict() for f in figures], indent=1))


def load(path: Path) -> list[Figure]:
    return [Figure.from_dict(d) for d in json.loads(path.read_text())]


def per_database(
    module: str,
    args: argparse.Namespace,
    argv: list[str] | None,
    measure: Callable[[str, argparse.Namespace], list[Figure]],
    *,
    timeout: float,
) -> list[Figure]:
    """Measure on each database ``args.db`` names (default both; SQLite only with --quick).

    Django is set up once per process, so with two databases each runs in a child
    process of ``module`` (``--db`` the one, ``--json`` a file read back here) with the
    rest of the command line.
    """
    kinds = args.db or (["sqlite"] if args.quick else ["sqlite", "postgres"])
    if len(kinds) == 1:
        return measure(kinds[0], args)
    figures: list[Figure] = []
    for kind in kinds:
        figures += _child(module, kind, argv if argv is not None else sys.argv[1:], timeout)
    return figures


def _child(module: str, kind: str, argv: list[str], timeout: float) -> list[Figure]:
    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--json", "--db"):
            skip = True
        elif not arg.startswith(("--json=", "--db=")):
            rest.append(arg)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        cmd = [sys.executable, "-m", module, "--db", kind, "--json", str(out), *rest]
        subprocess.run(cmd, check=True, timeout=timeout)
        return load(out)

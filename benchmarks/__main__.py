"""Run every benchmark and publish or check the results: ``python -m benchmarks [--quick] ...``.

``make bench`` runs each module (``benchmarks.engine``, ``.ingest``, ``.live_latency``,
``.approval``, ``.pages``, ``.tool_health``, ``.search``, ``.memory``, ``.batch``) in its own
process against a live local system on 127.0.0.1 and writes ``docs/benchmarks.md``: the machine and
versions, then each figure's median and spread over the runs and its ratio to a floor
measured in the same runs, with the published aims. ``benchmarks/commentary.md``
(what each figure means, why an aim is missed) is appended as written.

``make bench-check`` (CI) runs the small ``--quick`` version and compares each
ratio with ``benchmarks/baseline.json``: it fails only when a ratio is worse than
the baseline by more than ``--factor`` or a page needs more SQL queries, so a
slower or faster machine passes, a real regression does not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from benchmarks.report import Figure, fmt, load, spread

ROOT = Path(__file__).resolve().parent.parent
MODULES = [
    "engine",
    "ingest",
    "live_latency",
    "approval",
    "pages",
    "tool_health",
    "search",
    "memory",
    "batch",
]
BASELINE = ROOT / "benchmarks" / "baseline.json"
COMMENTARY = ROOT / "benchmarks" / "commentary.md"
PACKAGES = [
    "Django",
    "django-ninja",
    "channels",
    "channels-redis",
    "celery",
    "uvicorn",
    "gunicorn",
    "psycopg",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (CI)")
    parser.add_argument("--runs", type=int, help="runs per figure (default: each module's)")
    parser.add_argument(
        "--only", default=",".join(MODULES), help=f"comma-separated subset of {MODULES}"
    )
    parser.add_argument("--out", type=Path, help="write the markdown report here")
    parser.add_argument(
        "--results",
        type=Path,
        help="keep each module's figures in this JSON file; a run with --only replaces its "
        "modules' figures there and reports the others' as they were",
    )
    parser.add_argument("--check", type=Path, help="fail on a large regression against this file")
    parser.add_argument("--save-baseline", type=Path, help="write the ratios here as a baseline")
    parser.add_argument(
        "--factor", type=float, default=3.0, help="ratio worsening that fails --check (default 3)"
    )
    args = parser.parse_args(argv)
    modules = [m.strip() for m in args.only.split(",") if m.strip()]
    unknown = sorted(set(modules) - set(MODULES))
    if unknown:
        parser.error(f"--only: unknown modules {unknown}; choose from {MODULES}")

    started = time.monotonic()
    by_module, failed = run_modules(modules, args.quick, args.runs)
    if args.results:
        kept = json.loads(args.results.read_text()) if args.results.exists() else {}
        kept.update({m: [f.to_dict() for f in figs] for m, figs in by_module.items()})
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(kept, indent=1))
        by_module = {m: [Figure.from_dict(d) for d in kept[m]] for m in MODULES if m in kept}
    figures = [f for m in MODULES for f in by_module.get(m, [])]
    print(f"\nbenchmarks: {len(figures)} figures in {time.monotonic() - started:.0f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(markdown(figures, failed, args.quick))
        print(f"wrote {args.out}")
    if args.save_baseline:
        args.save_baseline.write_text(json.dumps(baseline_of(figures), indent=1, sort_keys=True))
        print(f"wrote {args.save_baseline}")
    problems = [f"module {m} failed" for m in failed]
    if args.check:
        problems += regressions(figures, json.loads(args.check.read_text()), args.factor)
    for line in problems:
        print(f"FAIL: {line}")
    return 1 if problems else 0


def run_modules(
    modules: list[str], quick: bool, runs: int | None
) -> tuple[dict[str, list[Figure]], list[str]]:
    """Each module in its own process: each sets Django up its own way, and a crash stays local."""
    figures: dict[str, list[Figure]] = {}
    failed: list[str] = []
    limit = 300 if quick else 2400  # tool_health at 1M steps on a busy 2-CPU VM: ~25 min
    with tempfile.TemporaryDirectory() as tmp:
        for module in modules:
            out = Path(tmp) / f"{module}.json"
            cmd = [sys.executable, "-m", f"benchmarks.{module}", "--json", str(out)]
            cmd += ["--quick"] if quick else []
            cmd += ["--runs", str(runs)] if runs else []
            print(f"\n== {' '.join(cmd[1:])}", flush=True)
            began = time.monotonic()
            try:
                code = subprocess.run(cmd, cwd=ROOT, timeout=limit).returncode
            except subprocess.TimeoutExpired:
                code = -1
                print(f"benchmarks.{module}: stopped after {limit} s")
            print(f"== benchmarks.{module}: {time.monotonic() - began:.0f} s", flush=True)
            if code != 0 or not out.exists():
                failed.append(module)
                continue
            figures[module] = load(out)
    return figures, failed


def baseline_of(figures: list[Figure]) -> dict[str, dict[str, object]]:
    """Each figure's ratio, query count and noise: how far its runs' ratios spread (max/min)."""
    return {
        f.key: {
            "ratio": f.ratio,
            "noise": round(max(f.ratios()) / min(f.ratios()), 2) if f.ratios() else None,
            "queries": f.queries,
            "better": f.better,
            "label": f.label,
        }
        for f in figures
        if f.ratio is not None or f.queries is not None
    }


def regressions(figures: list[Figure], baseline: dict[str, dict], factor: float) -> list[str]:
    """Ratios worse than the baseline's by more than ``factor``, and any extra SQL query.

    Only ratios are compared (never absolute times), so the check holds on a slower or
    busier machine: the floor slows down with it.
    """
    found: list[str] = []
    seen = {f.key: f for f in figures}
    measured = {key.split(".")[0] for key in seen}  # the modules run (a crash is reported apart)
    for key, base in sorted(baseline.items()):
        figure = seen.get(key)
        if figure is None:
            if key.split(".")[0] in measured:
                found.append(f"{key}: not measured (was in the baseline)")
            continue
        if base.get("queries") is not None and (figure.queries or 0) > base["queries"]:
            found.append(f"{key}: {figure.queries} SQL queries, baseline {base['queries']}")
        old, new = base.get("ratio"), figure.ratio
        if old is None or new is None:
            continue
        # A figure whose runs already spread more than ``factor`` (a p99 of a few dozen
        # samples) is only failed beyond that spread: noise is not a regression.
        allowed = max(factor, base.get("noise") or 0.0)
        worse = new > old * allowed if figure.better == "lower" else new < old / allowed
        verdict = "REGRESSION" if worse else "ok"
        print(f"check {key:<44} ratio {new:8.3f}  baseline {old:8.3f}  {verdict}")
        if worse:
            found.append(f"{key}: ratio {new:.3f} vs baseline {old:.3f} (factor {allowed:g})")
    return found


# -- the report ------------------------------------------------------------------------------


def machine() -> list[tuple[str, str]]:
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = "unknown"
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        kib = int(meminfo.read_text().split()[1])
        memory = f"{kib / 1024 / 1024:.1f} GiB"
    rows = [
        ("CPU", f"{cpu}, {os.cpu_count()} CPUs"),
        ("Memory", memory),
        ("OS", platform.platform()),
        ("Python", platform.python_version()),
        ("SQLite", sqlite3.sqlite_version),
        ("PostgreSQL", _postgres_version()),
        ("Redis", _redis_version()),
    ]
    for package in PACKAGES:
        try:
            rows.append((package, metadata.version(package)))
        except metadata.PackageNotFoundError:
            continue
    rows.append(
        (
            "Commit",
            (_git("rev-parse", "--short", "HEAD") or "unknown") + (" (dirty)" if _dirty() else ""),
        )
    )
    rows.append(("Date", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")))
    return rows


def _postgres_version() -> str:
    try:
        import psycopg

        url = os.environ.get(
            "SAGABOARD_BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432/postgres"
        )
        with psycopg.connect(url, connect_timeout=3) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "unknown"
    except Exception as exc:  # the report says why instead of failing
        return f"not reachable ({type(exc).__name__})"


def _redis_version() -> str:
    try:
        import redis

        info = redis.Redis(host="127.0.0.1", port=6379, socket_timeout=3).info("server")
        return str(info.get("redis_version", "unknown"))
    except Exception as exc:  # the report says why instead of failing
        return f"not reachable ({type(exc).__name__})"


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip()


def _dirty() -> bool:
    return bool(_git("status", "--porcelain", "--untracked-files=no"))


def markdown(figures: list[Figure], failed: list[str], quick: bool) -> str:
    runs = sorted({len(f.samples) for f in figures})
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m benchmarks`); do not edit by hand: the text after",
        "the tables comes from `benchmarks/commentary.md`. Every figure is measured against a",
        "live local system on 127.0.0.1, several times; **x floor** is the figure divided by its",
        "floor measured in the same run (the median of the per-run ratios, then their range).",
        "Ratios hold across machines; absolute numbers are this machine's.",
        "",
        f"Mode: {'quick (CI sizes)' if quick else 'full'}; runs per figure: "
        f"{', '.join(map(str, runs)) or '-'}.",
        "",
        "| Machine | |",
        "|---|---|",
        *[f"| {name} | {value} |" for name, value in machine()],
        "",
    ]
    if failed:
        lines += [f"**Failed modules:** {', '.join(failed)} (no figures from them).", ""]
    groups: dict[str, list[Figure]] = {}
    for f in figures:
        groups.setdefault(f.group, []).append(f)
    for group, members in groups.items():
        lines += [
            f"## {group}",
            "",
            "| Figure | Median | Spread | Floor | x floor | Aim | |",
            "|---|---:|---:|---|---:|---|---|",
        ]
        lines += [_row(f) for f in members]
        notes = [f"- *{f.label}*: {f.note}" for f in members if f.note]
        lines += ["", *notes, ""] if notes else [""]
    aims = [f for f in figures if f.aim]
    if aims:
        lines += ["## Aims", "", "| Aim | Figure | Measured | |", "|---|---|---:|---|"]
        for f in aims:
            assert f.aim is not None
            measured = fmt(f.median) + f" {f.unit}" if f.aim.on == "value" else f"{f.ratio:.2f}x"
            lines.append(f"| {f.aim.text} | {f.label} | {measured} | {_verdict(f)} |")
        lines.append("")
    if COMMENTARY.exists():
        lines += [COMMENTARY.read_text().rstrip(), ""]
    return "\n".join(lines)


def _row(f: Figure) -> str:
    q = f" ({f.queries} queries)" if f.queries is not None else ""
    floor = f"{f.floor_label}: {fmt(f.floor)} {f.unit}" if f.floor is not None else "-"
    ratios = f.ratios()
    ratio = "-" if f.ratio is None else f"{fmt(f.ratio)} ({spread(ratios)})"
    aim = f.aim.text if f.aim else ""
    return (
        f"| {f.label}{q} | {fmt(f.median)} {f.unit} | {spread(f.samples)} | {floor} | {ratio} "
        f"| {aim} | {_verdict(f)} |"
    )


def _verdict(f: Figure) -> str:
    met = f.met()
    return "" if met is None else ("met" if met else "**missed**")


if __name__ == "__main__":
    sys.exit(main())

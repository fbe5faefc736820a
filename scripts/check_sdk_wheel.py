"""Build both distributions and check the agent's one as an agent developer would get it.

1. Builds the undo-core and sagaboard wheels and sdists (``python -m build``) into --out.
2. Makes a fresh virtualenv and installs the undo-core wheel alone (its one dependency,
   httpx, from the package index), and in it:
   - imports every public module of undo_core (a module that needs an extra not installed,
     such as ``mcp``, must say so with an ImportError naming it) and fails if Django, Celery,
     Channels, ninja or sagaboard got loaded;
   - measures what the install added to site-packages (undo-core and its dependencies): the
     files the packages bring (installed with ``--no-compile``), the number checked against
     --max-mb, and again once Python has compiled them to bytecode (``compileall``, as pip
     does by default: a cache Python would otherwise write on first import);
   - runs the agent quickstart (docs/agents.md) in an empty folder against a live sagaboard (started
     from this checkout on a throw-away SQLite database) and checks the saga arrived.
3. Prints the sizes, and fails above --max-mb (3 MB: the issue's aim).

    .venv/bin/python scripts/check_sdk_wheel.py            # what CI runs (`make check-dist`)
    .venv/bin/python scripts/check_sdk_wheel.py --keep     # keep the virtualenv to look at
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.test_readme_quickstart import assert_on_server, run_quickstart  # noqa: E402
from tests.support.live_server import Server, prepare, temp_database  # noqa: E402

FORBIDDEN = ("django", "celery", "channels", "ninja", "sagaboard")
# Run inside the fresh virtualenv: import everything public, say what got loaded.
IMPORT_ALL = r"""
import importlib, json, pkgutil, sys
import undo_core
skipped, loaded = {}, []
for info in pkgutil.walk_packages(undo_core.__path__, "undo_core."):
    if any(part.startswith("_") for part in info.name.split(".")):
        continue
    try:
        importlib.import_module(info.name)
        loaded.append(info.name)
    except ImportError as err:
        skipped[info.name] = err.name or str(err)
print(json.dumps({"loaded": loaded, "skipped": skipped,
                  "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def run(*args: str | Path, cwd: Path = ROOT) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, args))}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def tree_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def site_packages(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


def build(out: Path) -> dict[str, int]:
    for project in (ROOT / "packaging" / "undo-core", ROOT):
        run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", out, project)
    built = {p.name: p.stat().st_size for p in sorted(out.iterdir())}
    names = " ".join(built)
    for kind in ("undo_core-", "sagaboard-"):
        assert f"{kind}" in names and ".whl" in names and ".tar.gz" in names, built
    return built


def check_venv(venv: Path, wheel: Path) -> dict[str, object]:
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    before = tree_size(site_packages(venv))
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
        wheel)  # fmt: skip
    added = tree_size(site_packages(venv)) - before
    run(python, "-m", "compileall", "-q", site_packages(venv))
    compiled = tree_size(site_packages(venv)) - before
    packages = json.loads(run(python, "-m", "pip", "list", "--format", "json"))
    found = json.loads(run(python, "-c", IMPORT_ALL, cwd=venv))
    leaked = sorted(set(found["modules"]) & set(FORBIDDEN))
    if leaked:
        raise SystemExit(f"importing undo_core loaded {leaked}")
    for module, missing in found["skipped"].items():
        # Only the extras' own modules may be missing, and they must say which package.
        if missing not in ("mcp", "pydantic_ai", "agents", "langchain_core", "pydantic"):
            raise SystemExit(f"{module} failed to import: {missing}")
    return {"python": python, "added": added, "compiled": compiled, "packages": packages, **found}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/check_sdk_wheel.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "dist", help="where the wheels and sdists go (dist/)"
    )
    parser.add_argument(
        "--max-mb", type=float, default=3.0, help="the undo-core install's size limit (3)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the virtualenv (its path is printed)"
    )
    args = parser.parse_args(argv)

    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    built = build(args.out)
    for name, size in built.items():
        print(f"built {name}: {size / 1024:.0f} KB")
    work = Path(tempfile.mkdtemp(prefix="undo-core-venv-"))
    try:
        wheel = next(args.out.glob("undo_core-*.whl"))
        found = check_venv(work / "venv", wheel)
        names = sorted(
            p["name"] for p in found["packages"] if p["name"] not in ("pip", "setuptools")
        )
        print(
            f"undo-core installed alone: {found['added'] / 1e6:.2f} MB of files added to "
            f"site-packages ({found['compiled'] / 1e6:.2f} MB with their bytecode), "
            f"{len(names)} packages: {', '.join(names)}"
        )
        print(
            f"imported {len(found['loaded'])} public modules without Django/Celery/Channels; "
            f"extras not installed: {found['skipped'] or 'none'}"
        )
        folder = work / "agent"
        folder.mkdir()
        with temp_database("sqlite", work) as db_url:
            token = prepare(db_url)
            with Server(db_url) as server:
                printed = run_quickstart(str(found["python"]), folder, server.url, token)
                assert_on_server(server.url, token, printed)
        print("the agent quickstart ran from the fresh virtualenv: the saga is on the server")
        if found["added"] > args.max_mb * 1e6:
            print(f"FAIL: {found['added'] / 1e6:.2f} MB is above {args.max_mb} MB")
            return 1
        return 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())

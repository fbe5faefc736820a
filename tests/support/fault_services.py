"""Dependencies of the test's own, to take down and bring back: the fault suite's servers.

The machine's shared Redis and PostgreSQL serve every other test (and other runs on the
same machine), so a fault test never stops them: it starts its own on a free port.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.live_server import free_port

__all__ = ["PostgresCluster", "RedisProcess", "SmallDisk"]

PG_BIN = Path(os.environ.get("SAGABOARD_PG_BIN", "/usr/lib/postgresql/15/bin"))


class RedisProcess:
    """A ``redis-server`` on 127.0.0.1 and a free port, keeping nothing on disk (as the
    machine's own): ``stop()`` loses everything in it, as a restarted production Redis
    without persistence would."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ping = subprocess.run(
                ["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True
            )
            if ping.stdout.strip() == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on {self.port} within {timeout:g} s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def __enter__(self) -> RedisProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PostgresCluster:
    """A PostgreSQL cluster of the test's own (``initdb`` in a temporary folder, trust auth,
    127.0.0.1 and a free port), run as the ``postgres`` user (PostgreSQL refuses root):
    ``stop()`` (fast shutdown: sessions cut, as in a restart) and ``start()`` at will."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self.folder = Path(tempfile.mkdtemp(prefix="sagaboard-pg-"))
        self.data = self.folder / "data"
        shutil.chown(self.folder, "postgres", "postgres")
        self._as_postgres(
            PG_BIN / "initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--no-sync",
        )  # fmt: skip

    def _as_postgres(self, *argv: object) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *map(str, argv)], check=True, capture_output=True, cwd=self.folder)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(
            PG_BIN / "pg_ctl", "-D", self.data, "-l", self.folder / "log", "-o", options,
            "-w", "-t", "60", "start",
        )  # fmt: skip

    def stop(self) -> None:
        self._as_postgres(PG_BIN / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def log(self) -> str:
        try:
            return (self.folder / "log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def __enter__(self) -> PostgresCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.running():
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


class SmallDisk:
    """A size-limited filesystem (a tmpfs of ``megabytes``) mounted at ``path``, which
    ``fill()`` fills to the last byte with a ballast file and ``free()`` empties again: a
    real ENOSPC for whatever writes there (SQLite's file, its WAL and journal).

    Mounting needs root (CAP_SYS_ADMIN): ``mount()`` says why when it cannot.
    """

    def __init__(self, path: Path, megabytes: int) -> None:
        self.path = path
        self.megabytes = megabytes
        self.ballast = path / "ballast"
        self.mounted = False

    def mount(self) -> str | None:
        """Mount it; ``None``, or why it could not be mounted here."""
        self.path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.megabytes}m", "tmpfs", str(self.path)],
            capture_output=True, text=True,
        )  # fmt: skip
        self.mounted = done.returncode == 0
        return None if self.mounted else f"cannot mount a tmpfs: {done.stderr.strip()}"

    def fill(self) -> int:
        """Write ballast until the filesystem refuses a byte; the bytes written."""
        written = 0
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (1 << 20, 1 << 12, 1):
                with contextlib.suppress(OSError):  # ENOSPC: go on with smaller writes
                    while True:
                        written += os.write(fd, b"\0" * size)
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        self.ballast.unlink(missing_ok=True)

    def __enter__(self) -> SmallDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False)
            self.mounted = False

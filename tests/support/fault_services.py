"""Dependencies of the test's own, to take down and bring back: the fault suite's servers.

The machine's shared Redis and PostgreSQL serve every other test (and other runs on the
same machine), so a fault test never stops them: it starts its own on a free port.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from tests.support.live_server import DEMO_UNDOS, ROOT, free_port

__all__ = ["Beat", "PostgresCluster", "RedisProcess", "SmallDisk"]

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


class Beat:
    """``celery -A sagaboard beat`` as its own process, as production runs it (the workers
    without ``-B``), logged to a file; ``kill()`` (SIGKILL) and ``start()`` again at will.

    Each start appends to the same log; ``sent()`` reads which tasks it sent and when, by
    the log's own timestamps (the beat's wall clock), from the latest start only or all.
    """

    SENT = re.compile(r"^\[([\d-]+ [\d:,]+): INFO/\w+\] Scheduler: Sending due task (\S+)", re.M)
    STARTED = re.compile(r"^\[([\d-]+ [\d:,]+): INFO/\w+\] beat: Starting\.\.\.", re.M)

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.env = {**DEMO_UNDOS, **env}
        self.log = workdir / "beat.log"
        self.schedule = workdir / "beat-schedule"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 60.0) -> None:
        """Launch it and wait until it logs "beat: Starting..." (its schedule is set up)."""
        self.starts += 1
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "sagaboard", "beat", "--loglevel=INFO",
                 "--schedule", str(self.schedule)],
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while len(self.STARTED.findall(self.tail(10_000_000))) < self.starts:
            if not self.alive():
                raise AssertionError(f"celery beat exited:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"celery beat not started in {timeout:g} s:\n{self.tail()}")
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        assert self.proc is not None, "start() first"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown of any kind, as the OOM killer or a lost host would."""
        assert self.proc is not None, "start() first"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def started_at(self) -> datetime:
        """When the latest start set up its schedule (the log's timestamp)."""
        found = self.STARTED.findall(self.tail(10_000_000))
        return _logged(found[-1])

    def sent(self, *, latest: bool = True) -> list[tuple[datetime, str]]:
        """(when, entry) of each task sent: since the latest start, or ever."""
        text = self.tail(10_000_000)
        if latest:
            text = text[text.rfind("beat: Starting...") :]
        return [(_logged(at), name) for at, name in self.SENT.findall(text)]

    def tail(self, chars: int = 6000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def __enter__(self) -> Beat:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _logged(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")

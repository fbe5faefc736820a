"""Dependencies of the test's own, to take down and bring back: the fault suite's servers.

The machine's shared Redis and PostgreSQL serve every other test (and other runs on the
same machine), so a fault test never stops them: it starts its own on a free port.
"""

from __future__ import annotations

import subprocess
import time

from tests.support.live_server import free_port

__all__ = ["RedisProcess"]


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

"""Threads that race on real transactions, each holding its own database connection first."""

from __future__ import annotations

import threading

from django.db import connection


class Start:
    """Releases ``n`` threads at one instant, each already connected.

    PostgreSQL's connection pool opens connections one at a time: on a loaded machine
    (CI runs servers and browsers beside these tests) several threads asking at once can
    wait out its timeout, which would make a race test fail on the pool instead of the
    race. Thread ``i`` connects after thread ``i - 1`` has, then all wait at one barrier.
    """

    def __init__(self, n: int, timeout: float = 60.0) -> None:
        self.connected = [threading.Event() for _ in range(n)]
        self.barrier = threading.Barrier(n)
        self.timeout = timeout

    def wait(self, i: int) -> None:
        if i:
            self.connected[i - 1].wait(timeout=self.timeout)
        connection.ensure_connection()
        self.connected[i].set()
        self.barrier.wait(timeout=self.timeout)

"""The live feed across real processes: uvicorn web servers, a saga made by another process.

Embedded (no ``REDIS_URL``): the one web process relays the event log to its browsers.
Production (``REDIS_URL``, two web processes): one process holds the relay lease and
publishes through Redis to both; when it dies the other takes over, so browsers keep
getting every event, exactly once. Servers run on their own database (a SQLite file,
or a fresh PostgreSQL database when the suite runs on PostgreSQL); every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from typing import Any
from unittest.mock import patch

import httpx
import pytest
import redis
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

from tests.support.live_server import (
    RELAY_KEYS,
    Server,
    load_demo,
    manage,
    redis_scratch,
    session_cookie,
    temp_database,
)

pytestmark = pytest.mark.slow

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
# A server, or an index to claim (``redis_scratch``).
REDIS_SERVER = os.environ.get("SAGABOARD_TEST_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")
LEADER = RELAY_KEYS[0]
ARRIVAL_SECONDS = 10.0  # a relayed event reaches browsers in well under a second
FAILOVER_SECONDS = 15.0  # lease TTL (3 s) + a stand-by's retry (1 s) + slack for slow CI
LOG_ID = re.compile(r'data-last="(\d+)"')

# A saga of a few events made outside the web servers; prints its event log ids.
MAKE_SAGA = (
    "import json; from sagaboard.models import Event, Project; "
    "from sagaboard.engine.services.django_store import DjangoStore; "
    "from undo_core import Saga, define_tool; "
    "store = DjangoStore(Project.objects.get(slug='demo')); "
    "s = Saga('cluster', saga_id={saga_id!r}, store=store); "
    "s.execute(define_tool('reserve_stock', lambda i: 1, lambda o, i: None), {{}}); s.complete(); "
    "print(json.dumps(list(Event.objects.filter(saga__saga_id={saga_id!r})"
    ".order_by('pk').values_list('pk', flat=True))))"
)


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database of the suite's kind with the demo project and the demo/demo login.

    Shared by this module's tests (each makes sagas of its own ids): setting one up
    takes seconds.
    """
    with temp_database("postgres" if PG else "sqlite", tmp_path_factory.mktemp("live")) as url:
        load_demo(url)
        yield url


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis database index of this test's own (see ``redis_scratch`` for why)."""
    with redis_scratch(REDIS_SERVER, hold_seconds=120) as url:
        yield url


def make_saga(database_url: str, saga_id: str) -> list[int]:
    """Run a saga in a separate process (as an agent or a worker would); its log ids."""
    out = manage(database_url, "shell", "-v", "0", "-c", MAKE_SAGA.format(saga_id=saga_id))
    return [int(n) for n in json.loads(out.splitlines()[-1])]  # after the shell's banner


class Tab:
    """A logged-in browser tab on the saga list: every fragment's log id, in arrival order."""

    def __init__(self, server: Server, ws: ClientConnection) -> None:
        self.server, self.ws = server, ws
        self.log_ids: list[int] = []
        self.texts: dict[int, str] = {}

    def wait_for(self, wanted: list[int], seconds: float) -> None:
        """Read fragments until every wanted log id has arrived, then a little longer.

        The extra read is how a duplicate (the same event sent twice) gets caught.
        """
        deadline = time.monotonic() + seconds
        while not set(wanted) <= set(self.log_ids) and time.monotonic() < deadline:
            self._read(deadline - time.monotonic())
        self._drain(0.5)

    def _read(self, seconds: float) -> None:
        try:
            message = str(self.ws.recv(timeout=max(0.01, seconds)))
        except TimeoutError:
            return
        for found in LOG_ID.findall(message):
            self.log_ids.append(int(found))
            self.texts[int(found)] = message

    def _drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._read(deadline - time.monotonic())


def open_tab(stack: ExitStack, server: Server) -> Tab:
    """Log in and open the saga list's socket; closed when ``stack`` unwinds."""
    ws = connect(
        server.url.replace("http://", "ws://") + "/ws/sagas/?list=1",
        origin=Origin(server.url),
        additional_headers={"Cookie": session_cookie(server.url)},
        open_timeout=10,
        close_timeout=2,
        proxy=None,
    )
    stack.callback(_close_quietly, ws)
    return Tab(server, ws.__enter__())


def _close_quietly(ws: Any) -> None:
    with suppress(Exception):  # a crashed server's socket is already gone
        ws.__exit__(None, None, None)


def assert_shown_once(tab: Tab, saga_id: str, log_ids: list[int], seconds: float) -> None:
    """Every event of the saga reached the tab as a fragment naming it, and only once."""
    tab.wait_for(log_ids, seconds)
    missing = sorted(set(log_ids) - set(tab.log_ids))
    assert not missing, f"{tab.server.url}: events {missing} of {saga_id} never arrived"
    repeated = {n: c for n, c in Counter(tab.log_ids).items() if c > 1}
    assert not repeated, f"{tab.server.url}: events sent more than once: {repeated}"
    assert all(saga_id in tab.texts[n] for n in log_ids)


def wait_for_leader(url: str, seconds: float = 10.0) -> None:
    """Until some web process holds the relay lease (relays start with the first socket)."""
    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        deadline = time.monotonic() + seconds
        while client.get(LEADER) is None:
            assert time.monotonic() < deadline, "no web process took the relay lease"
            time.sleep(0.05)
    finally:
        client.close()


def crash(server: Server) -> None:
    """SIGKILL: no clean shutdown, the lease is left to lapse as after a real crash."""
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait(timeout=10)
    server.proc = None


def test_embedded_a_saga_from_another_process_reaches_the_browser_once(database: str) -> None:
    with Server(database, env={"REDIS_URL": ""}) as server, ExitStack() as stack:
        tab = open_tab(stack, server)
        log_ids = make_saga(database, "embedded-1")
        assert_shown_once(tab, "embedded-1", log_ids, ARRIVAL_SECONDS)


def test_cluster_reaches_browsers_on_both_processes_once_and_survives_leader_crashes(
    database: str, redis_url: str
) -> None:
    a = Server(database, env={"REDIS_URL": redis_url})
    b = Server(database, env={"REDIS_URL": redis_url})
    with ExitStack() as stack:
        stack.callback(b.stop)
        stack.callback(a.stop)
        a.start()
        tab_a = open_tab(stack, a)
        wait_for_leader(redis_url)  # A leads: it was the only process with a browser
        b.start()
        tab_b = open_tab(stack, b)

        log_ids = make_saga(database, "cluster-1")
        for tab in (tab_a, tab_b):
            assert_shown_once(tab, "cluster-1", log_ids, ARRIVAL_SECONDS)

        crash(a)  # the leader: B must take the lease over and relay to its own browsers
        log_ids = make_saga(database, "cluster-2")
        assert_shown_once(tab_b, "cluster-2", log_ids, FAILOVER_SECONDS)

        a.start()  # back, standing by; B leads now
        tab_a = open_tab(stack, a)
        log_ids = make_saga(database, "cluster-3")
        for tab in (tab_a, tab_b):
            assert_shown_once(tab, "cluster-3", log_ids, ARRIVAL_SECONDS)

        crash(b)  # the leader again, the other way round
        log_ids = make_saga(database, "cluster-4")
        assert_shown_once(tab_a, "cluster-4", log_ids, FAILOVER_SECONDS)


# ------------------------------------------------------- who may watch, as a client sees it

# Long enough that only a pushed revocation can close a socket within the test's bound.
NO_BACKSTOP = {"SAGABOARD_LIVE_RECHECK_SECONDS": "600"}
REVOKED_WITHIN = 5.0  # seconds: a pushed revocation arrives in milliseconds


def close_code(
    server: Server, *, origin: str | None, cookie: str | None, seconds: float = 1.0
) -> int | None:
    """Open the list's socket with a raw client: the close code it gets, None if it stays open.

    The handshake must succeed (a refusal before accepting is an HTTP 403 that carries
    no code, which ``connect`` would raise): the code is what the browser's page sees.
    """
    with connect(
        server.url.replace("http://", "ws://") + "/ws/sagas/?list=1",
        origin=Origin(origin) if origin else None,
        additional_headers={"Cookie": cookie} if cookie else {},
        open_timeout=10,
        close_timeout=2,
        proxy=None,
    ) as ws:
        return wait_closed(ws, seconds)


def wait_closed(ws: ClientConnection, seconds: float) -> int | None:
    """Read (and drop) messages until the server closes: its code; None if still open."""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            ws.recv(timeout=max(0.01, deadline - time.monotonic()))
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None
    except TimeoutError:
        pass
    return None


def open_socket(stack: ExitStack, server: Server, cookie: str) -> ClientConnection:
    ws = connect(
        server.url.replace("http://", "ws://") + "/ws/sagas/?list=1",
        origin=Origin(server.url),
        additional_headers={"Cookie": cookie},
        open_timeout=10,
        close_timeout=2,
        proxy=None,
    )
    stack.callback(_close_quietly, ws)
    return ws.__enter__()


def log_out(server: Server, cookie: str) -> None:
    """The logout form, posted as the browser of ``cookie`` would."""
    csrf = cookie.split("csrftoken=")[1]
    response = httpx.post(
        f"{server.url}/logout/",
        data={"csrfmiddlewaretoken": csrf},
        headers={"Cookie": cookie, "Origin": server.url},
        trust_env=False,
    )
    assert response.status_code == 302, response.status_code


def viewer(database_url: str, name: str) -> None:
    """A member of the demo project with the viewer role, password ``name``-pw-123."""
    manage(database_url, "shell", "-v", "0", "-c", VIEWER.format(name=name))


VIEWER = (
    "from django.contrib.auth.models import Group, User; from sagaboard.models import Project; "
    "u = User.objects.create_user({name!r}, password={name!r} + '-pw-123'); "
    "u.groups.add(Group.objects.get(name='viewer')); "
    "Project.objects.get(slug='demo').members.add(u)"
)
REMOVE_MEMBER = (
    "from django.contrib.auth.models import User; from sagaboard.models import Project; "
    "Project.objects.get(slug='demo').members.remove(User.objects.get(username={name!r}))"
)


def test_a_raw_client_sees_the_documented_handshake_codes(database: str) -> None:
    with Server(database, env={"REDIS_URL": ""}) as server:
        cookie = session_cookie(server.url)
        port = server.port
        assert close_code(server, origin=server.url, cookie=None) == 4401
        for origin in (
            "http://evil.example",
            f"http://evil.example:{port}",
            f"https://127.0.0.1:{port}",  # same host and port, another scheme
            f"http://127.0.0.1:{port + 1}",  # same scheme and host, another port
            "http://127.0.0.1",
            f"http://localhost:{port}",  # an allowed host, but not the page's origin
            None,  # no Origin header at all: refused
        ):
            assert close_code(server, origin=origin, cookie=cookie) == 4403, origin
        assert close_code(server, origin=server.url, cookie=cookie) is None  # stays open


def test_a_trusted_origin_may_open_the_feed(database: str) -> None:
    env = {"REDIS_URL": "", "SAGABOARD_CSRF_TRUSTED_ORIGINS": "https://dash.example"}
    with Server(database, env=env) as server:
        cookie = session_cookie(server.url)
        assert close_code(server, origin="https://dash.example", cookie=cookie) is None
        assert close_code(server, origin="http://dash.example", cookie=cookie) == 4403


def test_logging_out_closes_the_raw_clients_feed_with_4401(database: str) -> None:
    with Server(database, env={"REDIS_URL": "", **NO_BACKSTOP}) as server, ExitStack() as stack:
        cookie = session_cookie(server.url)
        ws = open_socket(stack, server, cookie)
        assert wait_closed(ws, 0.3) is None
        log_out(server, cookie)
        assert wait_closed(ws, REVOKED_WITHIN) == 4401


def test_cluster_a_revocation_made_by_another_process_closes_sockets_on_every_web_process(
    database: str, redis_url: str
) -> None:
    """Logout on A closes that session's socket on B; a membership removed by a command
    (a third process) closes the user's sockets on A and B; others stay open."""
    env = {
        "REDIS_URL": redis_url,
        # Pub/sub ignores the database index: a prefix of this run's own keeps other
        # runs on this Redis (whose users have the same ids) out of it.
        "SAGABOARD_REDIS_PREFIX": f"liveperms-{uuid.uuid4().hex[:8]}",
        **NO_BACKSTOP,
    }
    viewer(database, "vera-cluster")
    a, b = Server(database, env=env), Server(database, env=env)
    with ExitStack() as stack:
        stack.callback(b.stop)
        stack.callback(a.stop)
        a.start()
        b.start()
        first, second = session_cookie(a.url), session_cookie(a.url)  # two demo sessions
        vera = session_cookie(a.url, "vera-cluster", "vera-cluster-pw-123")
        first_on_b = open_socket(stack, b, first)
        second_on_a = open_socket(stack, a, second)
        vera_on_a, vera_on_b = open_socket(stack, a, vera), open_socket(stack, b, vera)
        assert wait_closed(first_on_b, 0.3) is None

        log_out(a, first)  # on A: the socket on B is the one of that session
        assert wait_closed(first_on_b, REVOKED_WITHIN) == 4401

        env_for_command = {**os.environ, **env}
        with patch.dict(os.environ, env_for_command):
            manage(database, "shell", "-v", "0", "-c", REMOVE_MEMBER.format(name="vera-cluster"))
        assert wait_closed(vera_on_a, REVOKED_WITHIN) == 4403
        assert wait_closed(vera_on_b, REVOKED_WITHIN) == 4403
        assert wait_closed(second_on_a, 0.3) is None  # another session of the same user

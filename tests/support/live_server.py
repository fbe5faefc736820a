"""A live local sagaboard for benchmarks and end-to-end tests: a database, a token, a server.

Everything listens on 127.0.0.1 only, and every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import redis

from undo_core import MemoryStore, SagaChange
from undo_core.remote import change_to_event

ROOT = Path(__file__).resolve().parents[2]


class EventRecorder(MemoryStore):
    """Keeps each change of the sagas run against it as the SDK would send it, for a
    benchmark to post in whatever batches it measures."""

    def __init__(self) -> None:
        super().__init__(keep_events=False)
        self.events: list[dict[str, Any]] = []

    def apply(self, change: SagaChange) -> None:
        super().apply(change)
        self.events.append(change_to_event(change))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def temp_database(kind: str, workdir: Path) -> Iterator[str]:
    """A fresh database URL: a SQLite file in ``workdir``, or a new PostgreSQL database.

    For PostgreSQL, ``SAGABOARD_PG_URL`` (default ``postgres://postgres@127.0.0.1:5432``)
    names the server; the database is dropped afterwards.
    """
    if kind == "sqlite":
        yield f"sqlite:///{workdir / f'live-{uuid.uuid4().hex[:8]}.sqlite3'}"
        return
    import psycopg

    server = os.environ.get("SAGABOARD_PG_URL", "postgres://postgres@127.0.0.1:5432").rstrip("/")
    name = f"sagaboard_live_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


DEMO_UNDOS = {"SAGABOARD_COMPENSATION_MODULES": "sagaboard.demo.compensations"}
"""The demo's server-side undos (StoreBot's), which the runs here use with DEBUG on or off:
every process started here registers them unless the caller's environment says otherwise."""


LIVE_SECRET_KEY = os.environ.get(
    "SAGABOARD_SECRET_KEY", "live-test-only-not-secret-0123456789abcdef"
)
"""The servers' secret key: what they sign (decision links) a script must sign with it too."""


def manage(database_url: str, *args: str, settings: str = "sagaboard.config.settings") -> str:
    env = {
        **DEMO_UNDOS,
        "SAGABOARD_DEBUG": "1",  # local tooling: demo data allowed (the caller's env wins)
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": settings,
    }
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return done.stdout.strip()


def prepare(database_url: str, project: str = "shop") -> str:
    """Migrate, create a project and return a new token for it (via the real commands)."""
    manage(database_url, "migrate", "--no-input", "-v0")
    manage(database_url, "sagaboard_project", "create", project)
    return manage(database_url, "sagaboard_token", "create", project, "--label", "live")


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (gunicorn's and granian's workers, a worker's beat)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
            todo += [int(c) for c in children]
    return found


SERVERS = ("uvicorn", "gunicorn", "granian")
"""How a ``Server`` serves: uvicorn (ASGI: HTTP and websockets, as ``make run`` and the
Procfile's ``live``), gunicorn (WSGI, with the Procfile's own settings file,
sagaboard/config/gunicorn.py) or granian (WSGI; compared in benchmarks.ingest only)."""


class Server:
    """sagaboard served on 127.0.0.1 by one of ``SERVERS``; stop() and start() again on the
    same port."""

    def __init__(
        self,
        database_url: str,
        *,
        settings: str = "sagaboard.config.settings",
        debug: bool = False,
        env: dict[str, str] | None = None,
        server: str = "uvicorn",
        workers: int = 1,
        worker_class: str = "gthread",
        threads: int = 4,
        app: str = "",
    ) -> None:
        """``env`` adds to (or overrides) the server's environment, e.g. ``REDIS_URL``.

        ``workers``, ``worker_class`` and ``threads`` tune gunicorn (``worker_class``
        "sync" or "gthread") and granian (threads per worker); ``app`` names another
        application than sagaboard's own (``module:attribute``).
        """
        if server not in SERVERS:
            raise ValueError(f"server must be one of {SERVERS}, not {server!r}")
        self.database_url = database_url
        self.settings = settings
        self.debug = debug
        self.extra_env = dict(env or {})
        self.server = server
        self.workers = workers
        self.worker_class = worker_class
        self.threads = threads
        self.app = app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        """The command line, as the Procfile would run it on this port."""
        port = str(self.port)
        if self.server == "uvicorn":
            asgi = self.app or "sagaboard.config.asgi:application"
            return [sys.executable, "-m", "uvicorn", asgi, "--host", "127.0.0.1",
                    "--port", port, "--log-level", "warning", "--no-access-log"]  # fmt: skip
        wsgi = self.app or "sagaboard.config.wsgi:application"
        if self.server == "gunicorn":
            return [sys.executable, "-m", "gunicorn", "-c", "python:sagaboard.config.gunicorn",
                    "--bind", f"127.0.0.1:{port}", "--workers", str(self.workers),
                    "--worker-class", self.worker_class, "--threads", str(self.threads),
                    "--log-level", "warning", wsgi]  # fmt: skip
        return [sys.executable, "-m", "granian", "--interface", "wsgi", "--host", "127.0.0.1",
                "--port", port, "--workers", str(self.workers), "--blocking-threads",
                str(self.threads), "--log-level", "warning", "--no-ws", wsgi]  # fmt: skip

    def pids(self) -> list[int]:
        """The server's processes: its own and its workers' (gunicorn and granian fork)."""
        return [] if self.proc is None else process_tree(self.proc.pid)

    def start(self, timeout: float = 30.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting (start several, then ``wait_ready`` each)."""
        env = {
            **DEMO_UNDOS,
            **os.environ,
            "DATABASE_URL": self.database_url,
            "DJANGO_SETTINGS_MODULE": self.settings,
            # As in production: DEBUG off (no query log, no debug pages).
            "SAGABOARD_DEBUG": "1" if self.debug else "0",
            "SAGABOARD_SECRET_KEY": LIVE_SECRET_KEY,
            "SAGABOARD_ALLOWED_HOSTS": "127.0.0.1,localhost",
            **self.extra_env,
        }
        self.proc = subprocess.Popen(self.argv(), cwd=ROOT, env=env)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the API's schema answers 200 (Django loaded, URLs resolved)."""
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with code {self.proc.returncode}")
            try:
                if httpx.get(f"{self.url}/api/v1/openapi.json", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the server did not answer within {timeout:g} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Worker:
    """``celery -A sagaboard worker --pool=solo`` in its own process group, logged to a file.

    The solo pool runs tasks in the main process, so ``crash()`` (SIGKILL) kills an
    undo mid-flight exactly as the kernel's OOM killer would.
    """

    def __init__(self, name: str, env: dict[str, str], workdir: Path, *, beat: bool) -> None:
        self.name = f"{name}-{uuid.uuid4().hex[:6]}"
        self.log = workdir / f"worker-{name}.log"
        argv = [
            sys.executable, "-m", "celery", "-A", "sagaboard", "worker", "--pool=solo",
            "--loglevel=INFO", "-n", f"{self.name}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        if beat:
            argv += ["-B", "--schedule", str(workdir / f"beat-{name}")]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, env={**DEMO_UNDOS, **env}, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise AssertionError(f"worker {self.name} exited:\n{self.tail()}")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the worker logs that it consumes its queues."""
        deadline = time.monotonic() + timeout
        while "ready." not in self.tail(200_000):
            self.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"worker {self.name} not ready in {timeout:g} s:\n{self.tail()}"
                )
            time.sleep(0.1)

    def crash(self) -> None:
        """SIGKILL the worker's main process (the solo pool runs the undo in it)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        """A warm shutdown, then kill whatever is left of the process group (its beat too)."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def tail(self, chars: int = 6000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def session_cookie(base: str, username: str = "demo", password: str = "demo") -> str:
    """Log in the way a browser does; the ``Cookie`` header for a websocket of that user."""
    with httpx.Client(base_url=base, timeout=10, trust_env=False) as http:
        http.get("/login/").raise_for_status()
        csrf = http.cookies["csrftoken"]
        form = {"username": username, "password": password, "csrfmiddlewaretoken": csrf}
        http.post("/login/", data=form, headers={"Referer": f"{base}/login/"})
        assert "sessionid" in http.cookies, f"the {username} login failed"
        return f"sessionid={http.cookies['sessionid']}; csrftoken={csrf}"


# -- Redis and the demo, for clusters of servers -----------------------------------------

REDIS_SERVER = os.environ.get("SAGABOARD_BENCH_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")
RELAY_KEYS = ("sagaboard:relay:leader", "sagaboard:relay:cursor")
CLAIM = "sagaboard:test:redis-claim:{index}"
"""The claim of one database index, kept in database 0 (which is never handed out), so
that whatever a holder does to its own index (``flushdb``) leaves every claim alone."""
CLAIM_WAIT_SECONDS = 600.0
_MINE = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end "
_RENEW = _MINE + "return redis.call('expire', KEYS[1], ARGV[2])"
_RELEASE = _MINE + "return redis.call('del', KEYS[1])"


def redis_index_url(url: str, index: int) -> str:
    """``url`` (with or without a database index) on database ``index``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{index}"))


def redis_index(url: str) -> int | None:
    """The database index ``url`` names (``redis://host:6379/5``: 5), or None."""
    path = urlsplit(url).path.strip("/")
    return int(path) if path.isdigit() else None


@contextmanager
def redis_database(
    url: str = REDIS_SERVER, *, flush: bool = True, hold_seconds: int = 60
) -> Iterator[str]:
    """A Redis URL on a database index that this run alone holds until the block ends.

    ``url`` names the server, and may name an index (an environment variable's override:
    ``redis://127.0.0.1:6379/7``): that index is claimed, else any free one of 1-15. A
    claim another run holds is waited for, up to ``CLAIM_WAIT_SECONDS``. The index is
    flushed on entry and on exit unless ``flush`` is false (nobody else is on it).

    Why: every test that runs a Celery worker, a relay or a channel layer on Redis goes
    through here. Celery's queue (``celery``) and the relay's keys do not name the run they
    belong to, so two runs on one index take each other's tasks (a worker runs
    ``rollback_continue(pk)`` of another site against its own database and the other
    site's saga stays COMPENSATING) or share one relay lease. Under pytest-xdist that
    happens within one test run: a module's tests are spread over the processes, and
    each process that runs one sets up the module's fixtures of its own. A message left
    on an index by a killed run is flushed before the next holder starts.

    The claim (``CLAIM``, in database 0: SET NX with a token of this run's) expires after
    ``hold_seconds`` and a thread renews it every third of that while the block runs, so
    the claim of a run that was killed lapses within ``hold_seconds``.
    Pub/sub channels are global to the Redis server whatever the index: concurrent runs
    still hear each other unless their ``SAGABOARD_REDIS_PREFIX`` differ.
    """
    wanted = redis_index(url)
    if wanted == 0:
        raise ValueError(f"{url}: database 0 keeps the claims; name another index, or none")
    claims = redis.Redis.from_url(redis_index_url(url, 0), socket_timeout=5)
    token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    try:
        index = _claim(claims, [wanted] if wanted else list(range(1, 16)), token, hold_seconds)
        key = CLAIM.format(index=index)
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(hold_seconds / 3):
                with contextlib.suppress(redis.RedisError):
                    claims.eval(_RENEW, 1, key, token, hold_seconds)

        keeper = threading.Thread(target=renew, name=f"redis-claim-{index}", daemon=True)
        keeper.start()
        claimed = redis_index_url(url, index)
        target = redis.Redis.from_url(claimed, socket_timeout=5)
        try:
            if flush:
                target.flushdb()
            yield claimed
        finally:
            try:
                if flush:
                    target.flushdb()
            finally:
                target.close()
                stop.set()
                keeper.join()
                claims.eval(_RELEASE, 1, key, token)
    finally:
        claims.close()


def _claim(claims: redis.Redis, indexes: list[int], token: str, hold_seconds: int) -> int:
    """One of ``indexes`` claimed for ``token`` (waiting while all are held)."""
    deadline = time.monotonic() + CLAIM_WAIT_SECONDS
    while True:
        for index in random.sample(indexes, len(indexes)):
            if claims.set(CLAIM.format(index=index), token, nx=True, ex=hold_seconds):
                return index
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"no free Redis database index among {indexes} within {CLAIM_WAIT_SECONDS:g} s"
            )
        time.sleep(0.5)


def redis_scratch(
    server: str = REDIS_SERVER, hold_seconds: int = 600
) -> contextlib.AbstractContextManager[str]:
    """``redis_database(server)``: a flushed index of this run's own (relay keys included:
    a cursor left by an earlier run would make a fresh cluster's relay skip events)."""
    return redis_database(server, hold_seconds=hold_seconds)


# Migrate, then the demo project under a pk of our choosing, its sagas and the demo/demo
# login; then, if asked, an API token for it (printed last). One process: a Django start-up
# costs seconds on a busy machine.
_LOAD_DEMO = (
    "from django.core.management import call_command; from sagaboard.models import Project; "
    "call_command('migrate', '--no-input', verbosity=0); "
    "Project.objects.create(pk={pk}, slug='demo', name='Demo shop'); "
    "call_command('sagaboard_demo', '--force'); "
    "{token}"
)
_TOKEN = "call_command('sagaboard_token', 'create', 'demo', '--label', 'bench')"


def load_demo(url: str, *, token: bool = False) -> str:
    """Migrate, then load the demo project (under a random pk), its sagas and demo/demo.

    Returns a new API token for the project when ``token`` is true (else "").
    Why the random pk: channel-layer groups are named after the project's pk
    (``project.1`` in every fresh database) and Redis pub/sub ignores the database
    index, so two clusters on one Redis at once (a test run and a benchmark) would
    otherwise hear each other's events.
    """
    code = _LOAD_DEMO.format(pk=random.randrange(10**6, 10**9), token=_TOKEN if token else "")
    out = manage(url, "shell", "-v", "0", "-c", code)
    return out.splitlines()[-1].strip() if token else ""


# -- the proxy in front of the split topology (deploy/nginx.conf) ------------------------

NGINX = os.environ.get("SAGABOARD_NGINX", shutil.which("nginx") or "/usr/sbin/nginx")
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
_UPSTREAM = re.compile(r"(upstream (\w+) \{.*?)^(\s*)server 127\.0\.0\.1:\d+;\n", re.S | re.M)


def render_nginx_site(web: list[int], live: list[int], listen: int, text: str = "") -> str:
    """deploy/nginx.conf with its addresses replaced: the web processes' ports, the live
    processes' ports and 127.0.0.1:``listen``. Nothing else changes, so the tests run the
    proxy configuration the docs ship."""
    text = text or NGINX_CONF.read_text()
    ports = {"sagaboard_web": web, "sagaboard_live": live}

    def servers(match: re.Match[str]) -> str:
        indent = match.group(3)
        lines = "".join(f"{indent}server 127.0.0.1:{p};\n" for p in ports[match.group(2)])
        return match.group(1) + lines

    text, count = _UPSTREAM.subn(servers, text)
    text, listens = re.subn(r"^(\s*)listen 80;", rf"\g<1>listen 127.0.0.1:{listen};", text,
                            flags=re.M)  # fmt: skip
    if count != 2 or listens != 1:
        raise ValueError(f"{NGINX_CONF} no longer has the two upstreams and one listen line")
    return text


class Proxy:
    """nginx with deploy/nginx.conf (ports replaced), in the foreground, files in ``workdir``."""

    def __init__(self, workdir: Path, web: list[Server], live: list[Server]) -> None:
        self.dir = workdir / f"nginx-{uuid.uuid4().hex[:6]}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.web, self.live = web, live
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 15.0) -> None:
        assert Path(NGINX).exists(), f"{NGINX} missing: .ci/run installs Debian's nginx"
        for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        site = render_nginx_site([s.port for s in self.web], [s.port for s in self.live],
                                 self.port)  # fmt: skip
        (self.dir / "sagaboard.conf").write_text(site)
        temp = "".join(f"{sub}_temp_path {self.dir / (sub if sub != 'client_body' else 'body')};\n"
                       for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))  # fmt: skip
        (self.dir / "nginx.conf").write_text(
            ("user root;\n" if os.geteuid() == 0 else "")
            + f"daemon off;\nworker_processes 1;\npid {self.dir / 'nginx.pid'};\n"
            f"error_log {self.dir / 'error.log'} warn;\n"
            "events { worker_connections 1024; }\n"
            f"http {{\naccess_log off;\n{temp}include {self.dir / 'sagaboard.conf'};\n}}\n"
        )
        self.proc = subprocess.Popen(
            [NGINX, "-e", str(self.dir / "error.log"), "-p", str(self.dir), "-c",
             str(self.dir / "nginx.conf")],
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited with code {self.proc.returncode}:\n{self.log()}")
            try:
                httpx.get(f"{self.url}/healthz", timeout=1, trust_env=False)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"nginx did not answer within {timeout:g} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return (self.dir / "error.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: finish open requests
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> Proxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

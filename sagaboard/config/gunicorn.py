"""gunicorn's settings for the web processes: pages and the API, over WSGI.

Why WSGI for HTTP: every view and middleware here is sync, and Django's ASGI handler
runs each of them through a thread hop (about 26 per request); the same code served by
gunicorn took 1.8-1.9x the single-event POSTs when issue 19 measured it (benchmarks/
commentary.md, "Serving": reproduce with ``python -m benchmarks.ingest --servers ...``).
Websockets stay on the ASGI server (the ``live`` process, uvicorn), behind the same proxy
(deploy/nginx.conf routes ``/ws/`` there and everything else here).

One file for every way the web processes start (the Procfile, deploy/systemd, the tests'
and benchmarks' servers): ``gunicorn -c python:sagaboard.config.gunicorn
sagaboard.config.wsgi:application``.
The environment tunes it:

    PORT / SAGABOARD_WEB_BIND  where to listen (default 127.0.0.1:${PORT:-8000})
    WEB_CONCURRENCY            worker processes (default 2)
    SAGABOARD_WEB_WORKER       gunicorn's worker class: gthread (default) or sync
    SAGABOARD_WEB_THREADS      threads per gthread worker (default 4)

gthread, not sync: a sync worker holds one request at a time with no keep-alive
(gunicorn.org/design), so one slow request stalls a whole process and every request
opens a connection; gthread's threads and keep-alive avoid both, and it measured at
least as fast as sync here (benchmarks/commentary.md, "Serving").
"""

from __future__ import annotations

import os

# gunicorn's threads live as long as their process: each keeps its database connection
# between requests instead of opening one per request (settings, SAGABOARD_DB_CONN_MAX_AGE).
# Set here, in the web process's own environment, not in the WSGI module that tests and
# tools import too (their uvicorn servers inherit it, and ASGI must not keep connections).
os.environ.setdefault("SAGABOARD_DB_CONN_MAX_AGE", "600")

bind = [os.environ.get("SAGABOARD_WEB_BIND") or f"127.0.0.1:{os.environ.get('PORT', '8000')}"]
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = os.environ.get("SAGABOARD_WEB_WORKER", "gthread")
threads = int(os.environ.get("SAGABOARD_WEB_THREADS", "4"))
keepalive = 5  # seconds; the proxy's upstream keep-alive (deploy/nginx.conf) stays below
timeout = 60  # a worker silent this long is restarted
graceful_timeout = 30
accesslog = None  # the proxy logs requests
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
proc_name = "sagaboard-web"

"""Settings for sagaboard: one module, configured through environment variables.

Every variable is listed in the README ("Configuration") and in .env.example. Each is
read through sagaboard/config/env.py, so a bad value stops the start naming the variable.
Importing this module writes nothing (sagaboard/config/local_files.py makes var/ when needed).

Environment (the main ones):
    SAGABOARD_DEBUG          "0" (default) or "1" (`make run` sets it).
    SAGABOARD_SECRET_KEY     set it in production (the same on every host); without it a
                             random key is made on first use and kept in var/secret-key.
    SAGABOARD_VAR_DIR        the embedded default's folder (default: var/ in the checkout).
    SAGABOARD_ALLOWED_HOSTS  comma-separated; defaults to localhost names.
    SAGABOARD_HTTPS          "1" behind HTTPS: secure cookies, HSTS, redirect to https.
    DATABASE_URL             any dj-database-url URL; defaults to SQLite in var/.
    REDIS_URL                unset (default): the in-process channel layer, for one web
                             process. Set (redis://host:6379/0): channels_redis, so several
                             web processes share live updates (one of them relays the log).
    SAGABOARD_LIVE_POLL_SECONDS  how often the relay reads the event log when no commit
                             woke it (the safety net; default 0.25).
    SAGABOARD_LIVE_RECHECK_SECONDS  how often each open websocket's session and
                             permissions are checked again (default 5).
    SAGABOARD_REDIS_PREFIX   prefix of every name in Redis (default "sagaboard"); one per
                             installation sharing a Redis server.
    SAGABOARD_CLOCK_SKEW     seconds an agent's reported time may differ from the server's
                             before pages warn (default 300); lists never order by it.
"""

import importlib.util
from functools import partial
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP
from django.utils.functional import lazy

from sagaboard.config.env import (
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_link_template,
    env_list,
    env_seconds,
    env_str,
)
from sagaboard.config.local_files import local_secret_key

BASE_DIR = (
    Path(__file__).resolve().parent.parent.parent
)  # the checkout: sagaboard/config/ is two below

# The embedded default's files (the SQLite database, the generated secret key, the
# filesystem broker, collected static files). Nothing is written when this module is
# imported: sagaboard/config/local_files.py makes them when a process first needs them.
VAR_DIR = Path(env_str("SAGABOARD_VAR_DIR") or BASE_DIR / "var")

DEBUG = env_bool("SAGABOARD_DEBUG", False)

SECRET_KEY = env_str("SAGABOARD_SECRET_KEY")
if SECRET_KEY and len(SECRET_KEY) < 32:
    raise ImproperlyConfigured("SAGABOARD_SECRET_KEY must be at least 32 random characters.")
if not SECRET_KEY:
    # var/secret-key, read (or made) on first use, not at import.
    SECRET_KEY = lazy(partial(local_secret_key, VAR_DIR), str)()

ALLOWED_HOSTS = env_list("SAGABOARD_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("SAGABOARD_CSRF_TRUSTED_ORIGINS")

# Behind HTTPS (a proxy that terminates TLS sets X-Forwarded-Proto): everything secure,
# and the live feed accepts only https:// pages (sagaboard/live/access.py).
SAGABOARD_HTTPS = env_bool("SAGABOARD_HTTPS", False)
# Read whether or not HTTPS is on, so a bad value is refused before the day it is used.
_HSTS = (
    env_int("SAGABOARD_HSTS_SECONDS", 31536000, minimum=0),
    env_bool("SAGABOARD_HSTS_SUBDOMAINS", True),
    env_bool("SAGABOARD_HSTS_PRELOAD", True),
)
if SAGABOARD_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]  # probes speak plain HTTP
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS, SECURE_HSTS_INCLUDE_SUBDOMAINS, SECURE_HSTS_PRELOAD = _HSTS
SESSION_COOKIE_HTTPONLY = True
# Lax, not Strict: a link from a notification (Slack, mail) must open the page logged in;
# every state change is a POST, which Lax keeps off cross-site requests.
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = True  # no script reads it: htmx takes the token from the page
CSRF_FAILURE_VIEW = "sagaboard.ui.csrf.csrf_failure"  # says what to do, htmx posts included
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

# Content-Security-Policy (Django 6's middleware), on every response, with or without
# HTTPS. No inline script, no eval, no inline style: every script and stylesheet is a
# file under static/, and htmx runs with allowEval off (templates/_base.html). A stored
# payload that escaping ever missed could still not run.
SECURE_CSP = {
    "default-src": [CSP.NONE],  # anything not named below is refused
    "script-src": [CSP.SELF],  # our static files; no inline, no eval, no nonce needed
    "style-src": [CSP.SELF],  # sagaboard.css (and the admin's); no style attributes
    "img-src": [CSP.SELF],
    "font-src": [CSP.SELF],
    "connect-src": [CSP.SELF],  # htmx requests and the live feed (CSP 3: 'self' covers ws/wss)
    "form-action": [CSP.SELF],  # a form (or an injected one) posts nowhere else
    "frame-ancestors": [CSP.NONE],  # no framing: clickjacking (X-Frame-Options for old browsers)
    "base-uri": [CSP.NONE],  # an injected <base> cannot redirect relative URLs
    "object-src": [CSP.NONE],  # no plugins
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.humanize",
    "django.contrib.staticfiles",
    "ninja",  # the API docs page from local static files (its CDN page has inline script)
    "sagaboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    # Outside api_errors_as_json, so the API's own JSON error pages are not frameable either.
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "sagaboard.api.errors.api_errors_as_json",  # API errors Django makes (404, 405, 500) as JSON
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files, in every process
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "sagaboard.ui.not_found.not_found_as_page",  # the product's 404 page with DEBUG on too
    # 429 before a password is checked:
    "sagaboard.access.services.login_guard.LoginRateLimitMiddleware",
]

ROOT_URLCONF = "sagaboard.config.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],  # templates/ is the app's own (sagaboard/templates links to it)
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # ``visible``: ids and names with invisible characters shown (text policy).
            # ``when``: every time labelled, the reader's zone (README "Times").
            # ``action``: an action's value from undo_core's vocabulary.
            "builtins": [
                "sagaboard.ui.templatetags.sagaboard_text",
                "sagaboard.ui.templatetags.sagaboard_time",
                "sagaboard.ui.templatetags.sagaboard_vocabulary",
            ],
            # The pages' own tags live in the ui kit (sagaboard/ui/templatetags/), not at the
            # app's root.
            "libraries": {
                "sagaboard_json": "sagaboard.ui.templatetags.sagaboard_json",
                "sagaboard_links": "sagaboard.ui.templatetags.sagaboard_links",
                "sagaboard_payload": "sagaboard.ui.templatetags.sagaboard_payload",
                "sagaboard_list": "sagaboard.ui.templatetags.sagaboard_list",
            },
        },
    },
]

WSGI_APPLICATION = "sagaboard.config.wsgi.application"
ASGI_APPLICATION = "sagaboard.config.asgi.application"

# Database: DATABASE_URL wins; otherwise SQLite under var/ (its folder made at start-up).
DATABASE_URL = env_str("DATABASE_URL")
if not DATABASE_URL:
    DATABASE_URL = f"sqlite:///{VAR_DIR / 'sagaboard.sqlite3'}"
_DB_POOL = env_bool("SAGABOARD_DB_POOL", True)  # PostgreSQL only; read (and checked) always
# Seconds a connection outlives its request. 0 under ASGI, where each request runs on a
# fresh thread (a kept connection would be one per dead thread); the web processes
# (sagaboard/config/gunicorn.py) default it to 600: their threads live as long as the process,
# and opening a SQLite connection cost a third of a single-event POST (issue 32). Not used
# with the PostgreSQL pool, which keeps its connections itself.
_CONN_MAX_AGE = env_int("SAGABOARD_DB_CONN_MAX_AGE", 0, minimum=0)
DATABASES = {
    "default": dj_database_url.parse(DATABASE_URL, conn_max_age=_CONN_MAX_AGE),
}
# A kept connection is checked before a request reuses it: a database restarted in the
# meantime costs that request a reconnect, not an error.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = _CONN_MAX_AGE > 0
if (
    DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    and _DB_POOL
    and importlib.util.find_spec("psycopg_pool") is not None
):
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # A connection pool per process: opening a connection per request (under ASGI each
    # request runs on a fresh thread) costs more than most requests themselves.
    # ``timeout``: how long a request waits for a connection. While PostgreSQL restarts the
    # pool has none to give: the request fails (503, Retry-After) in seconds, not 30.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": 8,
        "timeout": env_float("SAGABOARD_DB_POOL_TIMEOUT", 5.0, minimum=0.1, what="seconds"),
    }
# Seconds a client is told to wait (Retry-After) when the database's disk is full: freeing
# disk takes a person (sagaboard.infra.db_outage).
SAGABOARD_DISK_FULL_RETRY_AFTER = env_int("SAGABOARD_DISK_FULL_RETRY_AFTER", 30, minimum=1)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Server-side parameter binding: values are sent apart from the SQL, adapted in C
    # (client-side binding quotes every value in Python, which dominated bulk ingestion).
    DATABASES["default"].setdefault("OPTIONS", {})["server_side_binding"] = True
    # A server that does not answer (not refusing) fails a connection in 5 s, not never.
    DATABASES["default"]["OPTIONS"].setdefault("connect_timeout", 5)
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, worker, commands) write one file: WAL lets readers go on
    # while one writes, and IMMEDIATE transactions queue writers on the timeout instead
    # of failing with "database is locked" when a read lock cannot be upgraded.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Tests use a file too: an in-memory database shared between threads locks whole
    # tables and ignores the timeout, which is not how the product runs.
    # SAGABOARD_TEST_SQLITE: another file, for test runs side by side in one checkout.
    DATABASES["default"]["TEST"] = {
        "NAME": env_str("SAGABOARD_TEST_SQLITE") or str(VAR_DIR / "test-sagaboard.sqlite3")
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# API limits (sagaboard/infra/http/limits.py, README "Limits"): a larger body is refused with 413,
# anything else over a limit with 422 naming the field; nothing of the request is stored.
SAGABOARD_API_MAX_BODY = env_int("SAGABOARD_API_MAX_BODY", 1024 * 1024, minimum=1)
SAGABOARD_API_MAX_BATCH = env_int("SAGABOARD_API_MAX_BATCH", 1000, minimum=1)
DATA_UPLOAD_MAX_MEMORY_SIZE = SAGABOARD_API_MAX_BODY
SAGABOARD_MAX_JSON_DEPTH = env_int("SAGABOARD_MAX_JSON_DEPTH", 32, minimum=1)
# Stored values (an input, an output, an error...) in characters; by default as large as a
# body can be, so checking it costs nothing until it is set lower.
SAGABOARD_MAX_VALUE_SIZE = env_int("SAGABOARD_MAX_VALUE_SIZE", SAGABOARD_API_MAX_BODY, minimum=1)
SAGABOARD_MAX_STEPS = env_int("SAGABOARD_MAX_STEPS", 1000, minimum=1)
# How much of one JSON value a page draws as a tree (README "Reading payloads"): nodes per
# tree and characters per string; past either the page says "truncated: N more" and links
# to the raw JSON.
SAGABOARD_PAYLOAD_MAX_NODES = env_int("SAGABOARD_PAYLOAD_MAX_NODES", 500, minimum=1)
SAGABOARD_PAYLOAD_MAX_STRING = env_int("SAGABOARD_PAYLOAD_MAX_STRING", 2000, minimum=1)
# A saga page draws its steps' trees itself up to this many steps; a longer saga's load
# when opened (its page and each live update of it would carry every node of every step).
SAGABOARD_PAYLOAD_INLINE_STEPS = env_int("SAGABOARD_PAYLOAD_INLINE_STEPS", 50, minimum=0)
# "Open trace" on the saga and its steps, for steps an agent sent with its OpenTelemetry span
# (README "Traces"): a link template such as https://jaeger.example/trace/{trace_id} or a
# Tempo / Logfire one; {span_id} is the step's span. Unset: no links.
SAGABOARD_TRACE_URL = env_link_template("SAGABOARD_TRACE_URL", ("trace_id", "span_id"))

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# Live updates: each web process's relay reads the event log when a commit wakes it
# (sagaboard/live/wake.py), and at least this often (the safety net for a lost wake or a
# writer that sends none), then relays new events to its browsers through the channel
# layer. With REDIS_URL, one web process at a time holds the relay lease and publishes
# through Redis to every web process.
SAGABOARD_LIVE_POLL_SECONDS = env_float(
    "SAGABOARD_LIVE_POLL_SECONDS", 0.25, minimum=0.001, what="a number of seconds"
)
# The backstop for revocations the app does not see (a session deleted in the database, an
# expiry, SQL by hand): every open websocket's session and user are checked this often.
# Changes made through the app (logout, admin edits, membership, roles) are pushed at once.
SAGABOARD_LIVE_RECHECK_SECONDS = env_float(
    "SAGABOARD_LIVE_RECHECK_SECONDS", 5.0, minimum=0.001, what="a number of seconds"
)
REDIS_URL = env_str("REDIS_URL")
# Names in Redis start with this: two sagaboards on one Redis must not share it (pub/sub
# channels ignore Redis's database number).
SAGABOARD_REDIS_PREFIX = env_str("SAGABOARD_REDIS_PREFIX", "sagaboard")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": SAGABOARD_REDIS_PREFIX},
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": 1000},
        }
    }
if REDIS_URL:
    # One cache for every process: rate-limit counters (failed logins, bad tokens) must
    # add up across web processes, or each process would allow the limit again.
    CACHES = {
        "default": {
            # Redis's RedisCache, with this process's memory standing in while Redis is
            # away (sagaboard/infra/fallback_cache.py): no 500 for a cache outage.
            "BACKEND": "sagaboard.infra.fallback_cache.FallbackRedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": SAGABOARD_REDIS_PREFIX,
            # A Redis that hangs (not refusing) fails over in seconds, not a request's life.
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 2},
        }
    }

# Rate limits (sagaboard/infra/http/rate_limits.py): COUNT/PERIOD (s, m, h, d), or "off".
# Failed logins per username and IP, and per IP whatever the username; failed API token
# checks per IP; tokens minted per user. Over a limit: 429 with Retry-After.
SAGABOARD_LOGIN_RATE = env_str("SAGABOARD_LOGIN_RATE", "5/15m")
SAGABOARD_LOGIN_IP_RATE = env_str("SAGABOARD_LOGIN_IP_RATE", "30/15m")
SAGABOARD_API_AUTH_RATE = env_str("SAGABOARD_API_AUTH_RATE", "30/1m")
SAGABOARD_TOKEN_MINT_RATE = env_str("SAGABOARD_TOKEN_MINT_RATE", "20/1h")

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "saga_list"
LOGOUT_REDIRECT_URL = "login"

STATIC_URL = "static/"
STATICFILES_DIRS: list[Path] = []  # static/ is the app's own (sagaboard/static links to it)
STATIC_ROOT = VAR_DIR / "static"  # made at start-up: whitenoise looks there first
# whitenoise serves static files from the web processes themselves (no nginx needed):
# collected and compressed by `manage.py collectstatic` in production, straight from the
# source folders otherwise.
WHITENOISE_USE_FINDERS = True
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Undos sagaboard runs itself (sagaboard/engine/services/undo_kinds.py) and the workers
# that run them. None by default in production; with DEBUG on (`make run`: every process,
# the worker included), the demo's StoreBot undos, so its server-run sagas undo as they should.
SAGABOARD_COMPENSATION_MODULES = env_list(
    "SAGABOARD_COMPENSATION_MODULES", "sagaboard.demo.compensations" if DEBUG else ""
)
SAGABOARD_WEBHOOK_SECRET = env_str("SAGABOARD_WEBHOOK_SECRET") or SECRET_KEY
SAGABOARD_ALLOW_COMMAND_UNDOS = env_bool("SAGABOARD_ALLOW_COMMAND_UNDOS", False)
SAGABOARD_UNDO_TIMEOUT_SECONDS = env_float(
    "SAGABOARD_UNDO_TIMEOUT_SECONDS", 30.0, minimum=0.001, what="a number of seconds"
)
# The working directory of command undos (created, mode 0700): never the project's.
SAGABOARD_COMMAND_UNDO_CWD = Path(
    env_str("SAGABOARD_COMMAND_UNDO_CWD") or VAR_DIR / "undo-commands"
)
# Outgoing notifications (Slack-compatible JSON, HMAC-signed): approvals created or expired,
# undos that ended ROLLBACK_FAILED. Links in them start with SAGABOARD_BASE_URL.
SAGABOARD_NOTIFY_URL = env_str("SAGABOARD_NOTIFY_URL")
SAGABOARD_BASE_URL = env_str("SAGABOARD_BASE_URL", "http://127.0.0.1:8000").rstrip("/")

# Deciding from elsewhere. E-mail: each project member who may approve gets a personal,
# single-use link (valid SAGABOARD_DECISION_LINK_HOURS) when an approval is asked for; the
# mail goes through Django's e-mail backend (console by default with DEBUG on, SMTP else).
# Slack: interactive Approve/Reject buttons post to /slack/interactions, verified with the
# Slack app's signing secret (unset: the endpoint answers 404).
SAGABOARD_DECISION_LINK_HOURS = env_float(
    "SAGABOARD_DECISION_LINK_HOURS", 24.0, minimum=0.01, what="a number of hours"
)
SAGABOARD_EMAIL_APPROVALS = env_bool("SAGABOARD_EMAIL_APPROVALS", True)
_MAIL_BACKEND = env_str(
    "SAGABOARD_EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend",
)
_MAIL_OPTIONS: dict[str, object] = {}
if _MAIL_BACKEND.endswith(".smtp.EmailBackend"):
    _MAIL_OPTIONS = {
        "host": env_str("SAGABOARD_EMAIL_HOST", "localhost"),
        "port": env_int("SAGABOARD_EMAIL_PORT", 25, minimum=1, maximum=65535),
        "username": env_str("SAGABOARD_EMAIL_USER"),
        "password": env_str("SAGABOARD_EMAIL_PASSWORD"),
        "use_tls": env_bool("SAGABOARD_EMAIL_TLS", False),
        "timeout": 10,
    }
elif _MAIL_BACKEND.endswith(".filebased.EmailBackend"):
    _MAIL_OPTIONS = {"file_path": env_str("SAGABOARD_EMAIL_FILE_PATH") or str(VAR_DIR / "mail")}
# Django 6.1's mailers (EMAIL_BACKEND and EMAIL_HOST... are deprecated); tests swap in locmem.
MAILERS = {"default": {"BACKEND": _MAIL_BACKEND, "OPTIONS": _MAIL_OPTIONS}}
DEFAULT_FROM_EMAIL = env_str("SAGABOARD_EMAIL_FROM", "sagaboard@localhost")
SAGABOARD_SLACK_SIGNING_SECRET = env_str("SAGABOARD_SLACK_SIGNING_SECRET")
SAGABOARD_SLACK_RESPONSE_URL_PREFIX = env_str(
    "SAGABOARD_SLACK_RESPONSE_URL_PREFIX", "https://hooks.slack.com/"
)  # where a Slack response_url may point (the outcome is posted there): Slack's host only

# Celery: Redis (or any broker URL) in production; with neither, a broker on the local
# filesystem under var/, so the embedded default needs no server. Tasks are acknowledged
# after they finish: a worker killed mid-undo has its task delivered again.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL") or REDIS_URL or "filesystem://"
if CELERY_BROKER_URL == "filesystem://":
    _queue_dir = VAR_DIR / "celery-queue"  # made at start-up (sagaboard/config/local_files.py)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "control_folder": str(VAR_DIR / "celery-control"),
        # kombu's filesystem transport sleeps this long whenever the queues are empty
        # (default 1 s, so an approved undo waited up to a second to start); a poll is
        # one listdir of a small folder: 0.05 s costs an idle worker ~0.3 % of a CPU.
        "polling_interval": 0.05,
    }
    # kombu's, with each message written whole before a worker can see it (a worker that
    # read a half-written message exited): sagaboard/infra/broker_files.py.
    CELERY_BROKER_TRANSPORT = "sagaboard.infra.broker_files:Transport"
else:
    # A task not acknowledged (its worker died) is delivered again after this long; the
    # sweep usually recovers the work sooner (see sagaboard/worker/tasks.py).
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": 900,
        # Queues and bindings in Redis carry the installation's prefix too.
        "global_keyprefix": f"{SAGABOARD_REDIS_PREFIX}:",
    }
# What every worker imports once Django is set up: the tasks (their names are
# sagaboard.infra.jobs's) and the heartbeat. Web processes import the tasks too
# (SagaboardConfig.ready), so jobs find them by name there.
CELERY_IMPORTS = ["sagaboard.worker.tasks", "sagaboard.worker.heartbeat"]
CELERY_TASK_ACKS_LATE = True
# Beat keeps its schedule in memory: every entry is periodic (a sweep every 10 s, retention
# daily), so nothing is lost on restart, and no schedule file can fail it (Python 3.13's
# shelve on dbm.sqlite3 crashed the embedded beat under load with "locking protocol").
CELERY_BEAT_SCHEDULER = "celery.beat:Scheduler"
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env_bool("SAGABOARD_TASKS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
SAGABOARD_WORKER_LEASE_SECONDS = env_float(
    "SAGABOARD_WORKER_LEASE_SECONDS", 60.0, minimum=0.001, what="a number of seconds"
)
# An operator's rollback request of a running saga that its agent has not carried out after
# this many seconds is marked overdue by the sweep, and the operators are told.
SAGABOARD_STOP_OVERDUE_SECONDS = env_float(
    "SAGABOARD_STOP_OVERDUE_SECONDS", 300.0, minimum=0.0, what="a number of seconds"
)
# Batch operations (README, "Batch operations"): items a worker processes between two
# checks for Cancel (and lease renewals), and a pause between chunks to pace a big batch.
SAGABOARD_BATCH_CHUNK = env_int("SAGABOARD_BATCH_CHUNK", 50, minimum=1)
SAGABOARD_BATCH_PAUSE_SECONDS = env_float(
    "SAGABOARD_BATCH_PAUSE_SECONDS", 0.0, minimum=0.0, what="a number of seconds"
)

# /metrics: open unless a token is set (then "Authorization: Bearer <token>").
SAGABOARD_METRICS_TOKEN = env_str("SAGABOARD_METRICS_TOKEN")

# Logs: JSON lines (SAGABOARD_LOG_FORMAT=json, the default when DEBUG is off) or text, to
# stderr; lines about a saga carry its saga_id and step_id (sagaboard/infra/logs.py).
SAGABOARD_LOG_FORMAT = env_choice(
    "SAGABOARD_LOG_FORMAT", "text" if DEBUG else "json", ("json", "text")
)
SAGABOARD_LOG_LEVEL = env_choice(
    "SAGABOARD_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"saga": {"()": "sagaboard.infra.logs.SagaContextFilter"}},
    "formatters": {
        "json": {"()": "sagaboard.infra.logs.JsonFormatter"},
        "text": {
            "format": "%(asctime)s %(levelname)s %(name)s [%(saga_id)s %(step_id)s] %(message)s"
        },
    },
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "filters": ["saga"],
            "formatter": "json" if SAGABOARD_LOG_FORMAT == "json" else "text",
        }
    },
    "root": {"handlers": ["stderr"], "level": SAGABOARD_LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # At DEBUG it logs a whole template context (a minted token's page included)
        # each time a variable is missing.
        "django.template": {"level": "INFO"},
    },
}

# Error reports (the DEBUG page, error e-mails) hide secrets and connection passwords.
DEFAULT_EXCEPTION_REPORTER_FILTER = "sagaboard.infra.logs.SecretsReporterFilter"

# Data retention (sagaboard/health/services/retention.py): a daily task deletes finished
# sagas (COMPLETED, ROLLED_BACK) last changed more than this many days ago; 0 turns it off.
# Unresolved sagas are never deleted. `manage.py sagaboard_retention` runs it by hand (and
# can archive).
SAGABOARD_RETENTION_DAYS = env_int("SAGABOARD_RETENTION_DAYS", 90, minimum=0)

# Per-tool health (sagaboard/health/services/tool_rollup.py): the beat task folds the sagas changed
# since its last run into the rollups every this many seconds (`manage.py sagaboard_rollup`
# does it by hand). The health pages are at most this old.
SAGABOARD_ROLLUP_SECONDS = env_float(
    "SAGABOARD_ROLLUP_SECONDS", 30.0, minimum=1.0, what="a number of seconds"
)

# Agents' clocks (sagaboard/infra/clock.py): lists, filters, charts, retention and sweeps use the
# server's own times; an agent's reported time further than this from the server's is
# shown with a warning.
SAGABOARD_CLOCK_SKEW = env_seconds("SAGABOARD_CLOCK_SKEW", 300.0)

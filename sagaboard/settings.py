"""Settings for sagaboard: one module, configured through environment variables.

Every variable is listed in the README ("Configuration") and in .env.example.

Environment (the main ones):
    SAGABOARD_DEBUG          "0" (default) or "1" (`make run` sets it).
    SAGABOARD_SECRET_KEY     set it in production (the same on every host); without it a
                             random key is made once and kept in var/secret-key.
    SAGABOARD_ALLOWED_HOSTS  comma-separated; defaults to localhost names.
    SAGABOARD_HTTPS          "1" behind HTTPS: secure cookies, HSTS, redirect to https.
    DATABASE_URL             any dj-database-url URL; defaults to SQLite in var/.
    REDIS_URL                unset (default): the in-process channel layer, for one web
                             process. Set (redis://host:6379/0): channels_redis, so several
                             web processes share live updates (one of them relays the log).
    SAGABOARD_LIVE_POLL_SECONDS  how often the relay reads the event log (default 0.025).
    SAGABOARD_REDIS_PREFIX   prefix of every name in Redis (default "sagaboard"); one per
                             installation sharing a Redis server.
    SAGABOARD_CLOCK_SKEW     seconds an agent's reported time may differ from the server's
                             before pages warn (default 300); lists never order by it.
"""

import importlib.util
import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: str) -> bool:
    return os.environ.get(name, default).strip().lower() in {"1", "true", "yes", "on"}


def _env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _env_seconds(name: str, default: str) -> float:
    """A number of seconds, 0 or more (unset or empty: ``default``); anything else stops the
    start with an error naming the variable, rather than a bare ValueError."""
    raw = os.environ.get(name, "").strip() or default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise ImproperlyConfigured(f"{name} must be a number of seconds (0 or more), not {raw!r}.")
    return value


VAR_DIR = BASE_DIR / "var"


def _local_secret_key() -> str:
    """A random key made once for this checkout (var/secret-key, readable by its owner only).

    For one host; several hosts must share SAGABOARD_SECRET_KEY, or their sessions and
    signed values would not be understood by each other.
    """
    path = VAR_DIR / "secret-key"
    if not path.exists():
        VAR_DIR.mkdir(exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


DEBUG = _env_bool("SAGABOARD_DEBUG", "0")

SECRET_KEY = os.environ.get("SAGABOARD_SECRET_KEY", "").strip() or _local_secret_key()
if len(SECRET_KEY) < 32:
    raise ImproperlyConfigured("SAGABOARD_SECRET_KEY must be at least 32 random characters.")

ALLOWED_HOSTS = _env_list("SAGABOARD_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = _env_list("SAGABOARD_CSRF_TRUSTED_ORIGINS")

# Behind HTTPS (a proxy that terminates TLS sets X-Forwarded-Proto): everything secure.
if _env_bool("SAGABOARD_HTTPS", "0"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]  # probes speak plain HTTP
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("SAGABOARD_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SAGABOARD_HSTS_SUBDOMAINS", "1")
    SECURE_HSTS_PRELOAD = _env_bool("SAGABOARD_HSTS_PRELOAD", "1")
SESSION_COOKIE_HTTPONLY = True
# Lax, not Strict: a link from a notification (Slack, mail) must open the page logged in;
# every state change is a POST, which Lax keeps off cross-site requests.
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = True  # no script reads it: htmx takes the token from the page
CSRF_FAILURE_VIEW = "sagaboard.csrf.csrf_failure"  # says what to do, htmx posts included
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
    "sagaboard.api_errors.api_errors_as_json",  # API errors Django makes (404, 405, 500) as JSON
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files, in every process
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "sagaboard.not_found.not_found_as_page",  # the product's 404 page with DEBUG on too
    "sagaboard.login_guard.LoginRateLimitMiddleware",  # 429 before a password is checked
]

ROOT_URLCONF = "sagaboard.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # ``visible``: ids and names with invisible characters shown (text policy).
            "builtins": ["sagaboard.templatetags.sagaboard_text"],
        },
    },
]

WSGI_APPLICATION = "sagaboard.wsgi.application"
ASGI_APPLICATION = "sagaboard.asgi.application"

# Database: DATABASE_URL wins; otherwise SQLite under var/ (created on demand).
DATABASE_URL = os.environ.get("DATABASE_URL", "").strip()
if not DATABASE_URL:
    VAR_DIR.mkdir(exist_ok=True)
    DATABASE_URL = f"sqlite:///{VAR_DIR / 'sagaboard.sqlite3'}"
DATABASES = {
    "default": dj_database_url.parse(DATABASE_URL, conn_max_age=0),
}
if (
    DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    and _env_bool("SAGABOARD_DB_POOL", "1")
    and importlib.util.find_spec("psycopg_pool") is not None
):
    # A connection pool per process: opening a connection per request (under ASGI each
    # request runs on a fresh thread) costs more than most requests themselves.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {"min_size": 1, "max_size": 8}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Server-side parameter binding: values are sent apart from the SQL, adapted in C
    # (client-side binding quotes every value in Python, which dominated bulk ingestion).
    DATABASES["default"].setdefault("OPTIONS", {})["server_side_binding"] = True
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
    VAR_DIR.mkdir(exist_ok=True)
    # SAGABOARD_TEST_SQLITE: another file, for test runs side by side in one checkout.
    DATABASES["default"]["TEST"] = {
        "NAME": os.environ.get("SAGABOARD_TEST_SQLITE") or str(VAR_DIR / "test-sagaboard.sqlite3")
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# API limits (sagaboard/limits.py, README "Limits"): a larger body is refused with 413,
# anything else over a limit with 422 naming the field; nothing of the request is stored.
SAGABOARD_API_MAX_BODY = int(os.environ.get("SAGABOARD_API_MAX_BODY", 1024 * 1024))
SAGABOARD_API_MAX_BATCH = int(os.environ.get("SAGABOARD_API_MAX_BATCH", 1000))
DATA_UPLOAD_MAX_MEMORY_SIZE = SAGABOARD_API_MAX_BODY
SAGABOARD_MAX_JSON_DEPTH = int(os.environ.get("SAGABOARD_MAX_JSON_DEPTH", 32))
# Stored values (an input, an output, an error...) in characters; by default as large as a
# body can be, so checking it costs nothing until it is set lower.
SAGABOARD_MAX_VALUE_SIZE = int(os.environ.get("SAGABOARD_MAX_VALUE_SIZE", SAGABOARD_API_MAX_BODY))
SAGABOARD_MAX_STEPS = int(os.environ.get("SAGABOARD_MAX_STEPS", 1000))

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

# Live updates: each web process polls the event log this often and relays new events
# to its browsers through the channel layer. With REDIS_URL, one web process at a time
# holds the relay lease and publishes through Redis to every web process.
SAGABOARD_LIVE_POLL_SECONDS = float(os.environ.get("SAGABOARD_LIVE_POLL_SECONDS", "0.025"))
REDIS_URL = os.environ.get("REDIS_URL", "").strip()
# Names in Redis start with this: two sagaboards on one Redis must not share it (pub/sub
# channels ignore Redis's database number).
SAGABOARD_REDIS_PREFIX = os.environ.get("SAGABOARD_REDIS_PREFIX", "sagaboard").strip()
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
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": SAGABOARD_REDIS_PREFIX,
        }
    }

# Rate limits (sagaboard/rate_limits.py): COUNT/PERIOD (s, m, h, d), or "off".
# Failed logins per username and IP, and per IP whatever the username; failed API token
# checks per IP; tokens minted per user. Over a limit: 429 with Retry-After.
SAGABOARD_LOGIN_RATE = os.environ.get("SAGABOARD_LOGIN_RATE", "5/15m")
SAGABOARD_LOGIN_IP_RATE = os.environ.get("SAGABOARD_LOGIN_IP_RATE", "30/15m")
SAGABOARD_API_AUTH_RATE = os.environ.get("SAGABOARD_API_AUTH_RATE", "30/1m")
SAGABOARD_TOKEN_MINT_RATE = os.environ.get("SAGABOARD_TOKEN_MINT_RATE", "20/1h")

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "saga_list"
LOGOUT_REDIRECT_URL = "login"

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise looks there first
# whitenoise serves static files from the web processes themselves (no nginx needed):
# collected and compressed by `manage.py collectstatic` in production, straight from the
# source folders otherwise.
WHITENOISE_USE_FINDERS = True
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Undos sagaboard runs itself (sagaboard/undo_kinds.py) and the workers that run them.
SAGABOARD_COMPENSATION_MODULES = _env_list(
    "SAGABOARD_COMPENSATION_MODULES", "sagaboard.demo_compensations"
)
SAGABOARD_WEBHOOK_SECRET = os.environ.get("SAGABOARD_WEBHOOK_SECRET", "") or SECRET_KEY
SAGABOARD_ALLOW_COMMAND_UNDOS = _env_bool("SAGABOARD_ALLOW_COMMAND_UNDOS", "0")
SAGABOARD_UNDO_TIMEOUT_SECONDS = float(os.environ.get("SAGABOARD_UNDO_TIMEOUT_SECONDS", "30"))
# The working directory of command undos (created, mode 0700): never the project's.
SAGABOARD_COMMAND_UNDO_CWD = Path(
    os.environ.get("SAGABOARD_COMMAND_UNDO_CWD", "").strip() or VAR_DIR / "undo-commands"
)
# Outgoing notifications (Slack-compatible JSON, HMAC-signed): approvals created or expired,
# undos that ended ROLLBACK_FAILED. Links in them start with SAGABOARD_BASE_URL.
SAGABOARD_NOTIFY_URL = os.environ.get("SAGABOARD_NOTIFY_URL", "").strip()
SAGABOARD_BASE_URL = os.environ.get("SAGABOARD_BASE_URL", "http://127.0.0.1:8000").rstrip("/")

# Celery: Redis (or any broker URL) in production; with neither, a broker on the local
# filesystem under var/, so the embedded default needs no server. Tasks are acknowledged
# after they finish: a worker killed mid-undo has its task delivered again.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "").strip() or REDIS_URL or "filesystem://"
if CELERY_BROKER_URL == "filesystem://":
    _queue_dir = VAR_DIR / "celery-queue"
    _queue_dir.mkdir(parents=True, exist_ok=True)
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
    # read a half-written message exited): sagaboard/broker_files.py.
    CELERY_BROKER_TRANSPORT = "sagaboard.broker_files:Transport"
else:
    # A task not acknowledged (its worker died) is delivered again after this long; the
    # sweep usually recovers the work sooner (see sagaboard/tasks.py).
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": 900,
        # Queues and bindings in Redis carry the installation's prefix too.
        "global_keyprefix": f"{SAGABOARD_REDIS_PREFIX}:",
    }
CELERY_TASK_ACKS_LATE = True
# Beat keeps its schedule in memory: every entry is periodic (a sweep every 10 s, retention
# daily), so nothing is lost on restart, and no schedule file can fail it (Python 3.13's
# shelve on dbm.sqlite3 crashed the embedded beat under load with "locking protocol").
CELERY_BEAT_SCHEDULER = "celery.beat:Scheduler"
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = _env_bool("SAGABOARD_TASKS_EAGER", "0")
CELERY_TASK_EAGER_PROPAGATES = True
SAGABOARD_WORKER_LEASE_SECONDS = float(os.environ.get("SAGABOARD_WORKER_LEASE_SECONDS", "60"))

# /metrics: open unless a token is set (then "Authorization: Bearer <token>").
SAGABOARD_METRICS_TOKEN = os.environ.get("SAGABOARD_METRICS_TOKEN", "").strip()

# Logs: JSON lines (SAGABOARD_LOG_FORMAT=json, the default when DEBUG is off) or text, to
# stderr; lines about a saga carry its saga_id and step_id (sagaboard/logs.py).
SAGABOARD_LOG_FORMAT = os.environ.get("SAGABOARD_LOG_FORMAT", "text" if DEBUG else "json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"saga": {"()": "sagaboard.logs.SagaContextFilter"}},
    "formatters": {
        "json": {"()": "sagaboard.logs.JsonFormatter"},
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
    "root": {"handlers": ["stderr"], "level": os.environ.get("SAGABOARD_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # At DEBUG it logs a whole template context (a minted token's page included)
        # each time a variable is missing.
        "django.template": {"level": "INFO"},
    },
}

# Error reports (the DEBUG page, error e-mails) hide secrets and connection passwords.
DEFAULT_EXCEPTION_REPORTER_FILTER = "sagaboard.logs.SecretsReporterFilter"

# Data retention (sagaboard/retention.py): a daily task deletes finished sagas (COMPLETED,
# ROLLED_BACK) last changed more than this many days ago; 0 turns it off. Unresolved sagas
# are never deleted. `manage.py sagaboard_retention` runs it by hand (and can archive).
SAGABOARD_RETENTION_DAYS = int(os.environ.get("SAGABOARD_RETENTION_DAYS", "90"))
if SAGABOARD_RETENTION_DAYS < 0:
    raise ImproperlyConfigured("SAGABOARD_RETENTION_DAYS must be 0 (off) or a number of days.")

# Agents' clocks (sagaboard/clock.py): lists, filters, charts, retention and sweeps use the
# server's own times; an agent's reported time further than this from the server's is
# shown with a warning.
SAGABOARD_CLOCK_SKEW = _env_seconds("SAGABOARD_CLOCK_SKEW", "300")

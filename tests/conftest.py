"""Shared pytest configuration for the whole suite.

Tests run with `--import-mode=importlib` and test folders have no `__init__.py`, so test
modules in different folders may share a name; helpers shared by several tests are in
`tests/support/` and import as `tests.support.<module>` (pytest puts the checkout on the path:
`pythonpath` in pyproject.toml). Django settings come from `sagaboard.config.settings`
(see `[tool.pytest.ini_options]` in pyproject.toml); DATABASE_URL picks the database.
"""

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

# PostgreSQL's connection pool of this process (the servers tests start have their own, as
# configured). Each async test runs an event loop of its own, and some end with a connection
# still checked out by a thread of theirs: the live revocation tests leave one each
# (measured with the pool's get_stats(); a long-lived loop, as a server's, returns them all).
# A pool that never gets them back would be exhausted part-way through a run, failing
# whatever test came next on its 5 s wait: room for a run's worth here.
_POOL = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
if isinstance(_POOL, dict):
    _POOL["max_size"] = 24


@pytest.fixture(autouse=True, scope="session")
def _demo_undos_registered() -> Any:
    """The suite's server-run sagas (StoreBot's, tests/support/hitl.py) use the demo's
    undos, which the settings register only with DEBUG on (never in production): the
    tests register them as `make run` does. A test may still set its own list."""
    if "django.conf" not in sys.modules:  # the Django-free suites
        yield
        return
    from django.conf import settings
    from django.test import override_settings

    from sagaboard.demo.flows import DEMO_COMPENSATIONS

    modules = [*settings.SAGABOARD_COMPENSATION_MODULES, DEMO_COMPENSATIONS]
    with override_settings(SAGABOARD_COMPENSATION_MODULES=list(dict.fromkeys(modules))):
        yield


@pytest.fixture(autouse=True)
def _cheap_password_hashes(request: pytest.FixtureRequest) -> Iterator[None]:
    """Passwords set during a test are hashed with MD5: the production hasher (PBKDF2, over
    a million rounds) takes half a second per user created or logged in, and most tests
    create several. Logging in still checks the password; hashes made with the configured
    hashers (by module fixtures) still verify. Not for tests marked ``slow``: their servers
    run in subprocesses with the production hashers and must read the users made here."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    md5 = "django.contrib.auth.hashers.MD5PasswordHasher"
    with override_settings(PASSWORD_HASHERS=[md5, *settings.PASSWORD_HASHERS]):
        yield


@pytest.fixture(autouse=True)
def _token_cache_starts_cold() -> None:
    """The tokens a web process has checked (sagaboard.access.services.tokens) outlive a test
    in one test process, and a test's rolled-back transaction puts the token version back:
    each test starts as a fresh process does, with none."""
    if "sagaboard.access.services.tokens" in sys.modules:
        sys.modules["sagaboard.access.services.tokens"].forget_checked_tokens()


@pytest.fixture(autouse=True)
def _rate_limit_counts_start_at_zero() -> None:
    """Rate-limit counters (sagaboard.infra.http.rate_limits) live in the cache, which in one test
    process outlives a test: each test starts with none, or a suite's wrong passwords and
    bad tokens would add up to a 429 in an unrelated test. Local-memory cache only: a
    Redis cache is shared with others and never flushed here."""
    if "django.core.cache" not in sys.modules:  # the Django-free suites
        return
    from django.core.cache import caches
    from django.core.cache.backends.locmem import LocMemCache

    if isinstance(caches["default"], LocMemCache):
        caches["default"].clear()


@pytest.fixture
def record_verified(request: pytest.FixtureRequest) -> Any:
    """After the test, every saga's event log replays to exactly its stored record
    (``manage.py sagaboard_verify``'s check) and the audit log's hash chains are
    unbroken (``--audit``): used by the modules that ingest events.

    A test that rewrites stored fields behind the log on purpose (to set up a changed
    undo plan) names them with ``@pytest.mark.record_rewritten("step.undo")``: those
    differences are expected, any other still fails it."""
    yield
    from sagaboard.audit.services.audit_chain import verify_audit
    from sagaboard.record.services.verify import (
        verify,  # here, as above: the Django-free suites share this file
    )

    marker = request.node.get_closest_marker("record_rewritten")
    allowed = set(marker.args) if marker is not None else set()
    report = verify()
    wrong = [d for d in report.differences if d.field not in allowed]
    assert not wrong, "the record differs from its event log:\n" + "\n".join(map(str, wrong))
    audit = verify_audit()
    assert audit.ok, "the audit log's chain is broken:\n" + "\n".join(map(str, audit.breaks))


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """OpenTelemetry on for one test: its finished spans in an in-memory exporter.

    The global tracer provider can be set once per process, so the test's provider is
    what ``get_tracer_provider`` answers while it runs (undo_core.tracing asks it).
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    yield exporter

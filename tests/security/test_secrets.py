"""Secrets stay secret: a token is shown once, when minted; the webhook secret never.

One walk through everything that touches a secret (minting on the page, API calls
with good, wrong and revoked tokens, a webhook undo that fails then succeeds, a
notification delivered after a failure, the pages and the admin) with every logger
at DEBUG (SQL with its parameters included) and ``DEBUG`` on; then no secret may be
found in any log record, response, stored row, or what receivers were sent.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core import serializers
from django.core.cache import cache
from django.db import connection
from django.test import Client, RequestFactory
from django.views.debug import get_default_exception_reporter_filter

from sagaboard import models
from sagaboard.access.services import tokens
from sagaboard.actions.services import runner
from sagaboard.infra.logs import JsonFormatter
from sagaboard.models import ApiToken, Notification, Project, Saga
from sagaboard.worker import tasks
from tests.support.hitl import person
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.django_db

WEBHOOK_SECRET = "whsec-7Qx2-never-in-a-log-Zp91"


class Everything(logging.Handler):
    """Keeps every record, formatted the way production writes it (JSON lines) and as text."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.json = JsonFormatter()
        self.text = logging.Formatter("%(name)s %(levelname)s %(message)s")

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.json.format(record))
        self.lines.append(self.text.format(record))
        self.lines.append(repr(record.args))


@pytest.fixture
def every_log() -> Iterator[Everything]:
    """Every logger at DEBUG, including SQL with parameters and loggers that don't propagate."""
    handler = Everything()
    names = [
        "", "django", "django.request", "django.server", "django.security", "django.db.backends",
        "celery", "celery.app.trace", "celery.task", "httpx", "httpcore", "sagaboard", "undo_core",
    ]  # fmt: skip
    loggers = [logging.getLogger(n) for n in {*names, *logging.root.manager.loggerDict}]
    saved = [(lg, lg.level, lg.disabled) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.DEBUG)
        lg.disabled = False
        if not lg.propagate or lg is logging.root:
            lg.addHandler(handler)
    connection.force_debug_cursor = True  # what DEBUG=True does: SQL logged with its args
    try:
        yield handler
    finally:
        connection.force_debug_cursor = False
        for lg, level, disabled in saved:
            lg.setLevel(level)
            lg.disabled = disabled
            lg.removeHandler(handler)


@pytest.fixture
def world(settings: Any) -> Iterator[Receiver]:
    receiver = Receiver()
    settings.DEBUG = True
    settings.SAGABOARD_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.SAGABOARD_NOTIFY_URL = receiver.url
    settings.CELERY_TASK_ALWAYS_EAGER = True
    cache.clear()
    yield receiver
    receiver.server.shutdown()
    cache.clear()


def api(client: Client, token: str, method: str, path: str, body: Any = None) -> Any:
    headers = {"authorization": f"Bearer {token}"}
    if method == "get":
        return client.get(f"/api/v1{path}", headers=headers)
    return client.post(
        f"/api/v1{path}", json.dumps(body), content_type="application/json", headers=headers
    )


def test_no_secret_is_logged_stored_or_shown_after_minting(
    every_log: Everything, world: Receiver
) -> None:
    receiver = world
    shop = Project.objects.create(slug="shop", name="Shop")
    root = get_user_model().objects.create_superuser("root", password="pw-root-123456")
    shop.members.add(root)
    admin = Client()
    admin.force_login(root)
    seen: list[str] = []  # every response body and header, but the mint's

    minted = admin.post("/tokens/", {"project": "shop", "label": "storebot"})
    assert minted.status_code == 201
    found = re.search(r'<code id="secret">(sgb_[^<]+)</code>', minted.content.decode())
    assert found is not None
    secret = found[1]
    other = tokens.token_create(project=shop, label="to revoke", acting_user=root).secret
    # The whole tokens, and their secret parts alone (after sgb_<prefix>_).
    secrets = [secret, secret.split("_", 2)[2], other, other.split("_", 2)[2], WEBHOOK_SECRET]

    agent = Client(REMOTE_ADDR="192.0.2.10")

    def call(method: str, path: str, body: Any = None, token: str = secret) -> Any:
        response = api(agent, token, method, path, body)
        seen.append(response.content.decode() + repr(dict(response.headers)))
        return response

    # Good, wrong and malformed tokens; then a revoked one.
    assert call("post", "/sagas", {"event_id": "e1", "name": "ops", "id": "s-1"}).status_code == 201
    for n, (url, approval) in enumerate([(receiver.url, False), (receiver.url, True)]):
        body = {"event_id": f"e{n + 2}", "tool_name": f"tool{n}", "requires_approval": approval}
        body["undo"] = {"kind": "webhook", "url": url}
        assert call("post", "/sagas/s-1/steps", body).status_code == 201
        path = f"/sagas/s-1/steps/step-{n + 1}/complete"
        assert call("post", path, {"event_id": f"c{n}", "output": {"id": n}}).status_code == 200
    assert call("get", "/sagas/s-1").status_code == 200
    for wrong in (secret[:-1] + ("A" if secret[-1] != "A" else "B"), secret + "x", secret[4:]):
        assert call("get", "/sagas", token=wrong).status_code == 401
    prefix = other.split("_")[1]
    revoked = admin.post(f"/tokens/{prefix}/revoke/", {"reason": "rotated"}, follow=True)
    seen.append(revoked.content.decode())
    assert call("get", "/sagas", token=other).status_code == 401

    # The rollback: the newest undo waits for approval (a notification goes out; the
    # receiver fails once), the approver approves, the webhook fails once, then works.
    assert call("post", "/sagas/s-1/rollback", {"event_id": "r"}).status_code == 202
    saga = Saga.objects.get(saga_id="s-1")
    receiver.statuses = [503]
    assert runner.rollback_continue(saga.pk) == "COMPENSATING"
    for note in Notification.objects.all():
        tasks.notification_send.apply(args=[note.pk])
        tasks.notification_send.apply(args=[note.pk])
    ann = Client()
    ann.force_login(person("ann", "approver", shop))
    pk = models.Approval.objects.get(status="PENDING").pk
    decided = ann.post(f"/approvals/{pk}/decide/", {"decision": "approve", "reason": "fine"})
    assert decided.status_code < 400
    receiver.statuses = [500]
    assert runner.rollback_continue(saga.pk) == "ROLLBACK_FAILED"
    step = models.Step.objects.get(saga=saga, step_id="step-2")
    models.Step.objects.filter(pk=step.pk).update(
        pending_action={"action": "retry", "by": "user:root"}
    )
    runner.step_action_run(step.pk)
    assert Saga.objects.get(pk=saga.pk).status == "ROLLED_BACK"
    assert receiver.bodies, "the webhooks and notifications were sent"

    # Every page a person or an admin might open.
    token_pk = ApiToken.objects.get(prefix=secret.split("_")[1]).pk
    for page in (
        "/tokens/", "/audit/", "/audit/?format=csv", "/approvals/", "/attention/", "/",
        "/overview/", f"/sagas/shop/{saga.saga_id}/", "/admin/sagaboard/apitoken/",
        f"/admin/sagaboard/apitoken/{token_pk}/change/", "/admin/sagaboard/auditentry/",
        "/admin/sagaboard/notification/", "/admin/sagaboard/event/", "/metrics",
    ):  # fmt: skip
        response = admin.get(page)
        assert response.status_code == 200, page
        body = b"".join(response.streaming_content) if response.streaming else response.content
        seen.append(body.decode() + repr(dict(response.headers)))

    stored = [
        serializers.serialize("json", model.objects.all())
        for model in (
            models.AuditEntry, models.Event, models.Notification, models.Step, models.Saga,
            models.CompensationAttempt, models.ApiRequest, models.Approval, ApiToken,
        )
    ]  # fmt: skip
    sent = [json.dumps(body) + signature for body, signature in receiver.bodies]
    # The token lookups were logged, with their parameters (the prefix, never the secret).
    lookups = [line for line in every_log.lines if "apitoken" in line and "args=(" in line]
    assert any(repr(secret.split("_")[1]) in line for line in lookups)
    for where, texts in (
        ("log", every_log.lines),
        ("response", seen),
        ("database", stored),
        ("sent", sent),
    ):
        for text in texts:
            for s in secrets:
                assert s not in text, f"a secret in a {where}: ...{text[:300]}..."


def test_the_debug_error_page_hides_secrets_and_connection_passwords(settings: Any) -> None:
    settings.DATABASE_URL = "postgres://sagaboard:db-pass-123@db.internal:5432/sagaboard"
    settings.REDIS_URL = "redis://:redis-pass-456@redis.internal:6379/0"
    settings.CELERY_BROKER_URL = "amqp://user:broker-pass-789@mq.internal//"
    settings.SAGABOARD_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.SAGABOARD_METRICS_TOKEN = "metrics-token-abc"
    request = RequestFactory().get("/", HTTP_AUTHORIZATION="Bearer sgb_12345678_top-secret")
    reporter = get_default_exception_reporter_filter()
    shown = repr(reporter.get_safe_settings()) + repr(reporter.get_safe_request_meta(request))
    for secret in (
        "db-pass-123", "redis-pass-456", "broker-pass-789", WEBHOOK_SECRET,
        "metrics-token-abc", "top-secret", str(django_settings.SECRET_KEY),
    ):  # fmt: skip
        assert secret not in shown, secret
    assert "db.internal" in shown  # the rest of the URL still helps debugging


def test_tokens_are_stored_hashed_found_by_prefix_and_compared_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shop = Project.objects.create(slug="shop", name="Shop")
    secret = tokens.token_create(project=shop, label="t").secret
    row = ApiToken.objects.get()
    assert secret.startswith(f"sgb_{row.prefix}_")
    assert secret.split("_", 2)[2] not in json.dumps(vars(row), default=str)
    compared: list[tuple[str, str]] = []
    real = tokens.hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens.hmac, "compare_digest", spy)
    assert tokens.token_authenticate(secret) is not None
    assert tokens.token_authenticate(secret[:-1] + "?") is None
    assert len(compared) == 2 and all(a == row.secret_hash for a, _ in compared)


def test_a_tokens_last_use_is_kept_to_the_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    shop = Project.objects.create(slug="shop", name="Shop")
    secret = tokens.token_create(project=shop, label="t").secret
    assert ApiToken.objects.get().last_used_at is None
    tokens.token_authenticate(secret)
    first = ApiToken.objects.get().last_used_at
    assert first is not None
    tokens.token_authenticate(secret)
    assert ApiToken.objects.get().last_used_at == first  # not a write per request
    later = first + timedelta(minutes=5)
    monkeypatch.setattr(tokens.timezone, "now", lambda: later)  # five minutes on
    tokens.token_authenticate(secret)
    assert ApiToken.objects.get().last_used_at == later
    monkeypatch.undo()
    long_ago = first - timedelta(days=1)
    ApiToken.objects.update(last_used_at=long_ago)
    assert tokens.token_authenticate(secret[:-1] + "?") is None
    assert ApiToken.objects.get().last_used_at == long_ago  # a wrong secret is not a use

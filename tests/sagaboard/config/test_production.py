"""Running it as users do: health and metrics probes, JSON logs, the deploy checks."""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from sagaboard.actions.services import runner
from sagaboard.health.services.health import worker_heartbeat
from sagaboard.infra.logs import JsonFormatter, SagaContextFilter, saga_context
from sagaboard.models import Heartbeat, Project
from tests.support.hitl import storebot_server_saga
from tests.support.live_server import ROOT

pytestmark = pytest.mark.django_db


def test_healthz_is_ok_when_the_database_and_a_worker_answer(client: Client) -> None:
    worker_heartbeat("celery@host:1")
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["checks"]["database"]["ok"]
    assert body["checks"]["worker"]["alive"] == 1


def test_healthz_names_a_silent_worker(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["worker"] == {
        "ok": False, "error": "no worker has ever reported", "ms": pytest.approx(0, abs=500)
    }  # fmt: skip
    Heartbeat.objects.create(name="old", at=timezone.now() - timedelta(minutes=5))
    late = client.get("/healthz").json()["checks"]["worker"]
    assert late["ok"] is False and late["last_seen_s"] >= 300


def test_healthz_reports_redis_when_it_is_used(client: Client, settings: Any) -> None:
    worker_heartbeat("w")
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    response = client.get("/healthz")
    assert response.status_code == 503 and response.json()["checks"]["redis"]["ok"] is False


def test_metrics_count_sagas_approvals_and_attempts(client: Client) -> None:
    shop = Project.objects.create(slug="shop", name="Shop")
    waiting = storebot_server_saga(shop, "w-1")
    runner.rollback_continue(waiting.pk)
    failing = storebot_server_saga(shop, "f-1", refund_needs_approval=False, return_fails_first=9)
    runner.rollback_continue(failing.pk)
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    lines = response.content.decode().splitlines()
    assert 'sagaboard_sagas{outcome="none",status="COMPENSATING"} 1' in lines
    assert 'sagaboard_sagas{outcome="WITH_EXCEPTIONS",status="ROLLBACK_FAILED"} 1' in lines
    assert "sagaboard_approvals_pending 1" in lines
    assert "sagaboard_undos_failed_open 1" in lines
    assert 'sagaboard_undo_attempts{outcome="failed"} 1' in lines
    assert "# TYPE sagaboard_sagas gauge" in lines


def test_metrics_need_the_token_when_one_is_set(client: Client, settings: Any) -> None:
    settings.SAGABOARD_METRICS_TOKEN = "scrape-secret"
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 401
    ok = client.get("/metrics", headers={"authorization": "Bearer scrape-secret"})
    assert ok.status_code == 200


def test_log_lines_about_a_saga_carry_its_ids_as_json() -> None:
    record = logging.makeLogRecord({"name": "sagaboard.actions.services.runner", "msg": "undo %s",
                                    "args": (2,), "levelname": "INFO", "attempt": 2})  # fmt: skip
    with saga_context("storebot-1", "step-2"):
        SagaContextFilter().filter(record)
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "undo 2" and line["attempt"] == 2
    assert (line["saga_id"], line["step_id"]) == ("storebot-1", "step-2")


@pytest.mark.slow  # settings loaded in a subprocess
def test_the_production_settings_pass_the_deploy_checks() -> None:
    env = {
        **os.environ,
        "SAGABOARD_DEBUG": "0",
        "SAGABOARD_SECRET_KEY": secrets.token_urlsafe(50),
        "SAGABOARD_ALLOWED_HOSTS": "board.example.com",
        "SAGABOARD_HTTPS": "1",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


@pytest.mark.slow  # settings loaded in a subprocess
def test_a_short_secret_key_is_refused() -> None:
    env = {**os.environ, "SAGABOARD_SECRET_KEY": "short"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0 and "at least 32 random characters" in done.stderr

"""Health and metrics: what a load balancer and Prometheus ask a web process.

``/healthz`` answers 200 only when the database answers, Redis answers (when
configured), and a worker has shown a sign of life lately; otherwise 503 with
the failing check named. ``/metrics`` is Prometheus's text format, computed from
the database on each scrape (a few grouped counts), so every web process gives
the same numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Min
from django.utils import timezone

from sagaboard.models import (
    Approval,
    CompensationAttempt,
    Event,
    Heartbeat,
    Notification,
    Saga,
    Step,
)
from undo_core import RollbackOutcome, SagaStatus, StepState, WaitingFor

_OUTCOMES = {
    s: (
        (RollbackOutcome.CLEAN.value, RollbackOutcome.WITH_EXCEPTIONS.value)
        if s is SagaStatus.ROLLED_BACK
        else (RollbackOutcome.WITH_EXCEPTIONS.value,)
        if s is SagaStatus.ROLLBACK_FAILED
        else ("none",)
    )
    for s in SagaStatus
}
"""The outcome labels each status is always reported with (0 when there are none)."""

WORKER_SILENCE = timedelta(seconds=60)
"""A worker not heard from for this long is taken for gone."""


def worker_heartbeat(name: str) -> None:
    Heartbeat.objects.update_or_create(name=name, defaults={"at": timezone.now()})


def _timed(check: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    began = time.perf_counter()
    try:
        result = check()
    except Exception as err:  # a probe reports; it never raises
        result = {"ok": False, "error": f"{type(err).__name__}: {err}"[:300]}
    result["ms"] = round((time.perf_counter() - began) * 1000, 1)
    return result


def _database() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"ok": True}


def _redis() -> dict[str, Any]:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        return {"ok": bool(client.ping())}
    finally:
        client.close()


def _workers() -> dict[str, Any]:
    newest = Heartbeat.objects.order_by("-at").first()
    if newest is None:
        return {"ok": False, "error": "no worker has ever reported"}
    age = (timezone.now() - newest.at).total_seconds()
    alive = Heartbeat.objects.filter(at__gte=timezone.now() - WORKER_SILENCE).count()
    return {
        "ok": age < WORKER_SILENCE.total_seconds(),
        "alive": alive,
        "last_seen_s": round(age, 1),
    }


def health() -> tuple[bool, dict[str, Any]]:
    checks = {"database": _timed(_database), "worker": _timed(_workers)}
    if settings.REDIS_URL:
        checks["redis"] = _timed(_redis)
    ok = all(c["ok"] for c in checks.values())
    return ok, {"status": "ok" if ok else "failing", "checks": checks}


def _line(name: str, value: float, **labels: str) -> str:
    if labels:
        inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
        return f"{name}{{{inner}}} {value:g}"
    return f"{name} {value:g}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def metrics_text() -> str:
    """Prometheus text exposition (version 0.0.4) of the state of every project."""
    now = timezone.now()
    out: list[str] = []

    def gauge(name: str, help_text: str, rows: Sequence[tuple[dict[str, str], float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} gauge")
        out.extend(_line(name, value, **labels) for labels, value in rows)

    _saga_gauges(gauge)
    _approval_gauges(gauge, now)
    _undo_gauges(gauge)
    _event_log_gauges(gauge)
    _delivery_gauges(gauge, now)
    return "\n".join(out) + "\n"


# ``metrics_text``'s gauges by subject, in the order they are exposed: each helper asks the
# database for one subject and hands its rows to ``gauge``.
type Gauge = Callable[[str, str, Sequence[tuple[dict[str, str], float]]], None]


def _saga_gauges(gauge: Gauge) -> None:
    """Sagas by status and outcome (every known pair, zeros too), and whom they wait for."""
    by_status: dict[tuple[str, str], int] = {}
    for status, outcome, n in (
        Saga.objects.values_list("status", "outcome").annotate(n=Count("pk")).order_by()
    ):
        key = (status, outcome or "none")
        by_status[key] = by_status.get(key, 0) + n
    # outcome: CLEAN or WITH_EXCEPTIONS for a rollback that came to rest, "none" otherwise:
    # a ROLLED_BACK with an undo rejected, resolved, left or in doubt is never counted clean.
    rows = [
        ({"status": s.value, "outcome": o}, by_status.get((s.value, o), 0))
        for s in SagaStatus
        for o in _OUTCOMES[s]
    ]
    rows += [
        ({"status": st, "outcome": o}, n)
        for (st, o), n in sorted(by_status.items())
        if st in SagaStatus.__members__ and o not in _OUTCOMES[SagaStatus(st)]
    ]
    gauge("sagaboard_sagas", "Sagas by status and rollback outcome.", rows)
    waiting = dict(
        Saga.objects.filter(waiting_for__isnull=False)
        .values_list("waiting_for")
        .annotate(n=Count("pk"))
        .order_by()
    )
    gauge("sagaboard_sagas_waiting", "Sagas whose rollback waits for a person, by whom.",
          [({"waiting_for": w.value}, waiting.get(w.value, 0)) for w in WaitingFor])  # fmt: skip


def _approval_gauges(gauge: Gauge, now: datetime) -> None:
    """Pending approvals: how many, and how long the oldest has waited."""
    pending = Approval.objects.filter(status=Approval.Status.PENDING).aggregate(
        n=Count("pk"), oldest=Min("created_at")
    )
    gauge("sagaboard_approvals_pending", "Undos waiting for an approval.", [({}, pending["n"])])
    oldest = (now - pending["oldest"]).total_seconds() if pending["oldest"] else 0
    gauge("sagaboard_approval_oldest_pending_seconds",
          "Age of the oldest pending approval (0 when none).", [({}, oldest)])  # fmt: skip


def _undo_gauges(gauge: Gauge) -> None:
    """Failed undos nobody settled, and the undo attempts by outcome."""
    failed = Step.objects.filter(state=StepState.ROLLBACK_FAILED, left_at__isnull=True).count()
    gauge("sagaboard_undos_failed_open", "Undos ROLLBACK_FAILED that nobody settled or left.",
          [({}, failed)])  # fmt: skip
    attempts = dict(
        CompensationAttempt.objects.values_list("outcome").annotate(n=Count("pk")).order_by()
    )
    rows = [({"outcome": str(k or "running")}, v) for k, v in sorted(attempts.items(), key=str)]
    gauge("sagaboard_undo_attempts", "Undo attempts recorded, by outcome.", rows)


def _event_log_gauges(gauge: Gauge) -> None:
    """The event log's newest id (the live feed's cursor) and how late it was recorded."""
    last = Event.objects.order_by("-pk").values("pk", "at", "recorded_at").first()
    gauge("sagaboard_event_log_last_id", "The newest event log id (the live feed's cursor).",
          [({}, last["pk"] if last else 0)])  # fmt: skip
    lag = (last["recorded_at"] - last["at"]).total_seconds() if last else 0
    gauge("sagaboard_event_ingest_lag_seconds",
          "For the newest event: how long after the time its agent reported sagaboard "
          "recorded it (an agent clock that is off shows here too).",
          [({}, max(lag, 0))])  # fmt: skip


def _delivery_gauges(gauge: Gauge, now: datetime) -> None:
    """Notifications not delivered yet, and each worker's last sign of life."""
    undelivered = Notification.objects.filter(delivered_at__isnull=True).count()
    gauge("sagaboard_notifications_undelivered", "Notifications not delivered yet.",
          [({}, undelivered)])  # fmt: skip
    gauge("sagaboard_worker_heartbeat_age_seconds", "Seconds since each worker's last sign.",
          [({"worker": h.name}, (now - h.at).total_seconds())
           for h in Heartbeat.objects.order_by("name")[:100]])  # fmt: skip

"""sagaboard's URLs plus the benchmark floors (never used in production).

* ``/bench/floor``: the plainest Django view, one INSERT per event. The ingestion
  benchmark divides the API's throughput by this view's, measured on the same
  server in the same run.
* ``/bench/page-floor``: the plainest dashboard page, login required, one indexed
  query, a tiny template. The page benchmark divides each page's time by it.
* ``/bench/plain/event`` and ``/bench/plain/events``: what a Django user would write
  to store events, the floors a user would pick (issue 19): a django-ninja sync
  endpoint doing one ORM ``create`` of the event (schema-validated), and one doing
  ``bulk_create`` of a batch. Served by gunicorn's sync worker, they are the floors of
  ``ingest.*.single_plain.*`` and ``ingest.*.batch_plain.*``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.db import connection, models, transaction
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI, Schema

from sagaboard.config.urls import urlpatterns as sagaboard_urls
from sagaboard.models import Saga

_created = False
_PAGE = engines["django"].from_string(
    "<!doctype html><title>{{ saga.name }}</title><p>{{ saga.saga_id }} {{ saga.status }}</p>"
)


def _ensure_table() -> None:
    global _created
    if _created:
        return
    key = "BIGSERIAL" if connection.vendor == "postgresql" else "INTEGER"
    with connection.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS bench_floor (id {key} PRIMARY KEY, body TEXT)")
    _created = True


class PlainEvent(models.Model):
    """The event as a plain Django app would keep it. Unmanaged (no migration anywhere):
    ``_ensure_plain_table`` creates its table on first use, like ``bench_floor``'s."""

    event_id = models.CharField(max_length=64, unique=True)
    saga_id = models.CharField(max_length=64, db_index=True)
    type = models.CharField(max_length=32)
    body = models.JSONField()

    class Meta:
        app_label = "bench"
        managed = False
        db_table = "bench_plain_event"


_plain_created = False


def _ensure_plain_table() -> None:
    global _plain_created
    if _plain_created:
        return
    pg = connection.vendor == "postgresql"
    key = "BIGSERIAL" if pg else "INTEGER"
    with connection.cursor() as cur:
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS bench_plain_event (id {key} PRIMARY KEY,"
            " event_id VARCHAR(64) NOT NULL UNIQUE, saga_id VARCHAR(64) NOT NULL,"
            f" type VARCHAR(32) NOT NULL, body {'JSONB' if pg else 'TEXT'} NOT NULL)"
        )
        cur.execute(
            "CREATE INDEX IF NOT EXISTS bench_plain_event_saga ON bench_plain_event (saga_id)"
        )
    _plain_created = True


class PlainEventIn(Schema):
    event_id: str
    type: str
    saga: dict[str, Any]
    step: dict[str, Any] | None = None
    event: dict[str, Any]


class PlainBatchIn(Schema):
    events: list[PlainEventIn]


plain = NinjaAPI(urls_namespace="bench-plain", docs_url=None, openapi_url=None)


def _row(event: PlainEventIn) -> PlainEvent:
    return PlainEvent(
        event_id=event.event_id, saga_id=str(event.saga["id"]), type=event.type,
        body=event.model_dump(),
    )  # fmt: skip


@plain.post("/event")
def plain_event(request: HttpRequest, event: PlainEventIn) -> dict[str, bool]:
    """One event, one ORM insert (autocommit: one transaction)."""
    _ensure_plain_table()
    _row(event).save(force_insert=True)
    return {"ok": True}


@plain.post("/events")
def plain_events(request: HttpRequest, batch: PlainBatchIn) -> dict[str, int]:
    """A batch, one ``bulk_create`` in one transaction."""
    _ensure_plain_table()
    with transaction.atomic():
        PlainEvent.objects.bulk_create([_row(e) for e in batch.events])
    return {"accepted": len(batch.events)}


@csrf_exempt
def floor(request: HttpRequest) -> HttpResponse:
    _ensure_table()
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("INSERT INTO bench_floor (body) VALUES (%s)", [request.body.decode()])
    return HttpResponse(b'{"ok": true}', content_type="application/json")


@login_required
def page_floor(request: HttpRequest) -> HttpResponse:
    """One saga by its unique (project, saga_id) index, through the same middleware and
    context processors as every dashboard page."""
    saga = Saga.objects.filter(project__slug="big", saga_id=request.GET.get("saga", "")).first()
    return HttpResponse(_PAGE.render({"saga": saga}, request))


urlpatterns = [
    *sagaboard_urls,
    path("bench/floor", floor),
    path("bench/page-floor", page_floor),
    path("bench/plain/", plain.urls),
]

"""sagaboard's URLs plus the benchmark floors (never used in production).

* ``/bench/floor``: the plainest Django view, one INSERT per event. The ingestion
  benchmark divides the API's throughput by this view's, measured on the same
  server in the same run.
* ``/bench/page-floor``: the plainest dashboard page, login required, one indexed
  query, a tiny template. The page benchmark divides each page's time by it.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

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
]

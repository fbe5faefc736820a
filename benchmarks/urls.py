"""sagaboard's URLs plus ``/bench/floor``: the plainest Django view, one INSERT per event.

The ingestion benchmark divides the API's throughput by this view's, measured on
the same server in the same run.
"""

from __future__ import annotations

from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from sagaboard.urls import urlpatterns as sagaboard_urls

_created = False


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


urlpatterns = [*sagaboard_urls, path("bench/floor", floor)]

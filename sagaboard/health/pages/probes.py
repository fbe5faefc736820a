"""``/healthz`` for load balancers and ``/metrics`` for Prometheus (thin: see services.health)."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from sagaboard.health.services import health


@never_cache
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """200 when the database, Redis (if used) and a worker answer; 503 naming what does not."""
    ok, body = health.health()
    return JsonResponse(body, status=200 if ok else 503)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format; with SAGABOARD_METRICS_TOKEN set, only for that bearer token."""
    token = settings.SAGABOARD_METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            return JsonResponse(
                {
                    "error": {
                        "code": "unauthorized",
                        "message": "a metrics bearer token is required",
                    }
                },
                status=401,
            )
    return HttpResponse(health.metrics_text(), content_type="text/plain; version=0.0.4")

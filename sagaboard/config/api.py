"""API v1: the one django-ninja API, its bearer-token auth, and every feature's router.

The handlers live with their features (``sagaboard.record.api.v1``, ``.actions.api.decisions``,
``.batches.api.batches``); this module only puts them together, like ``urls.py`` does for
the pages. Every error leaves as ``{"error": {"code", "message", "field", ...}}``
(docs/api.md), by the one map of ``sagaboard.api.errors``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja.renderers import JSONRenderer
from ninja.responses import NinjaJSONEncoder

from sagaboard.access.api.caller import TokenAuth
from sagaboard.actions.api.decisions import router as decisions_router
from sagaboard.api import errors, openapi_bounds
from sagaboard.batches.api.batches import router as batches_router
from sagaboard.infra.http.limits import JsonParser
from sagaboard.record.api.v1 import router as record_router


class _Encoder(NinjaJSONEncoder):
    """Times with their full microseconds (Django's encoder cuts them to milliseconds)."""

    def default(self, o: Any) -> Any:
        if isinstance(o, datetime):
            return o.isoformat()
        return super().default(o)


class _Renderer(JSONRenderer):
    encoder_class = _Encoder


api = openapi_bounds.BoundedNinjaAPI(
    renderer=_Renderer(),
    parser=JsonParser(),
    title="sagaboard",
    version="1",
    description="Saga events from AI agents; see docs/api.md.",
    urls_namespace="api-v1",
    auth=TokenAuth(),
)

errors.install(api)


api.add_router("/", record_router)
api.add_router("/", decisions_router)
api.add_router("/", batches_router)

"""ASGI entry point: Django for HTTP, the live feed for websockets (logged-in users only)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sagaboard.config.settings")
django_asgi_app = get_asgi_application()  # before importing anything that touches models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from sagaboard.api.handler import for_api_asgi  # noqa: E402
from sagaboard.infra.http.body_limit import BodyLimit  # noqa: E402
from sagaboard.live.access import OriginCheck  # noqa: E402
from sagaboard.live.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Agents' bearer-token API calls skip the browser's middleware (sagaboard.api.handler).
        "http": BodyLimit(for_api_asgi(django_asgi_app)),
        # The Origin's scheme, host and port against the dashboard's own (and
        # CSRF_TRUSTED_ORIGINS); a refusal is accepted then closed with 4403 (live_access).
        "websocket": OriginCheck(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

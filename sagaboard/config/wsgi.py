"""WSGI entry point: pages and the API in production (gunicorn; sagaboard/config/gunicorn.py).

Websockets are not served here: the proxy sends ``/ws/`` to the ASGI process
(sagaboard.config.asgi, uvicorn), which also runs the live relay. Nothing here starts a
relay: it starts with the first websocket of a process (sagaboard.live.consumers).
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sagaboard.config.settings")

django_wsgi_app = get_wsgi_application()  # before importing anything that touches models

from sagaboard.api.handler import for_api_wsgi  # noqa: E402
from sagaboard.infra.http.body_limit import WsgiBodyLimit  # noqa: E402
from sagaboard.infra.http.forwarded import ProxiedAddress  # noqa: E402

# The client's address from the proxy's X-Forwarded-For (login rate limits count per
# address), then the API's body limit, then Django: agents' bearer-token API calls through
# the API's own handler (sagaboard.api.handler, no browser middleware), the rest through
# the whole stack.
application = ProxiedAddress(WsgiBodyLimit(for_api_wsgi(django_wsgi_app)))

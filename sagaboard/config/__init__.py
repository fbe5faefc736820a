"""The project's configuration: settings (from the environment), URLs, the ASGI and
WSGI entry points, the Celery app."""

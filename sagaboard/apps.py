"""The app: once Django's registry is ready, the layers are wired (``config.wiring``)."""

from django.apps import AppConfig


class SagaboardConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "sagaboard"
    verbose_name = "Sagaboard"

    def ready(self) -> None:
        # Inside ready(): models and what imports them load only once the registry is.
        from sagaboard.config import wiring

        wiring.connect()

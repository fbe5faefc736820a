from django.apps import AppConfig


class SagaboardConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "sagaboard"
    verbose_name = "Sagaboard"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from sagaboard.sqlite_wal import keep_wal_open

        connection_created.connect(keep_wal_open, dispatch_uid="sagaboard.sqlite_wal")

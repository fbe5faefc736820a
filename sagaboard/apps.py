from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


class SagaboardConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "sagaboard"
    verbose_name = "Sagaboard"

    def ready(self) -> None:
        from django.conf import settings
        from django.contrib.auth.signals import user_logged_in, user_login_failed
        from django.db.backends.signals import connection_created

        from sagaboard.login_guard import login_failed, login_succeeded
        from sagaboard.rate_limits import parse_rate
        from sagaboard.sqlite_wal import keep_wal_open

        # A mistyped rate fails at start-up, not on the first failed login.
        for name in RATE_SETTINGS:
            try:
                parse_rate(getattr(settings, name))
            except ValueError as err:
                raise ImproperlyConfigured(f"{name}: {err}") from err
        user_login_failed.connect(login_failed, dispatch_uid="sagaboard.login_failed")
        user_logged_in.connect(login_succeeded, dispatch_uid="sagaboard.login_succeeded")
        connection_created.connect(keep_wal_open, dispatch_uid="sagaboard.sqlite_wal")


RATE_SETTINGS = (
    "SAGABOARD_LOGIN_RATE",
    "SAGABOARD_LOGIN_IP_RATE",
    "SAGABOARD_API_AUTH_RATE",
    "SAGABOARD_TOKEN_MINT_RATE",
)

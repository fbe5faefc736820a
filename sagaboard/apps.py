from django.apps import AppConfig


class SagaboardConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "sagaboard"
    verbose_name = "Sagaboard"

"""Celery tasks: thin adapters that call domain services; nothing else lives here."""

"""Celery tasks: thin adapters that call the features' services; nothing else lives here."""

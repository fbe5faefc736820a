"""Batch jobs: thin API handlers (django-ninja)."""

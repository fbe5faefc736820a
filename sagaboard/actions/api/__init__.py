"""What people do to sagas and steps: thin API handlers (django-ninja)."""

"""Recording what agents report: thin API handlers (django-ninja)."""

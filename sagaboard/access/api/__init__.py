"""Who may see and do what: thin API handlers (django-ninja)."""

"""sagaboard: the Django project and app that shows, approves and undoes agent sagas."""

"""HTTP API v1 (django-ninja): thin handlers, their schemas, the one map from errors
to HTTP answers."""

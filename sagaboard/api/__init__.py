"""The API kit every feature's handlers share: the one error map, schemas, the event schema,
OpenAPI links and bounds (the handlers live in their features; config/api.py mounts them)."""

"""The OpenAPI schema says what the API really does: bounds set by settings, 429, headers.

django-ninja draws the schema from the pydantic models, which know fixed bounds
(``max_length``, ``le``) but not the ones an operator sets (``SAGABOARD_MAX_VALUE_SIZE``,
``SAGABOARD_API_MAX_BATCH``, read at request time). Fields bounded by a setting carry a
marker (``x-sagaboard-max-length``, ``x-sagaboard-max-items``) that this module replaces
with the setting's current value each time the schema is served. It also documents, on
every operation, the answers any of them can give: 401 with its ``WWW-Authenticate``
header, 429 (too many bad tokens from one address), 503 and 507 with ``Retry-After``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from ninja import NinjaAPI
from ninja.openapi.schema import OpenAPISchema
from ninja.operation import Operation

from sagaboard.api.links import OPERATION_PREFIX

WWW_AUTHENTICATE = 'Bearer realm="sagaboard"'
"""The challenge every 401 carries (RFC 6750)."""

_MARKERS = {"x-sagaboard-max-length": "maxLength", "x-sagaboard-max-items": "maxItems"}
_ERROR_REF = {"$ref": "#/components/schemas/ErrorOut"}
_HEADERS = {
    "401": {
        "WWW-Authenticate": {
            "description": f"Always {WWW_AUTHENTICATE} (RFC 6750).",
            "schema": {"type": "string", "enum": [WWW_AUTHENTICATE]},
        }
    },
    "429": {
        "Retry-After": {
            "description": "Seconds until this address may try a token again.",
            "schema": {"type": "integer", "minimum": 1},
        }
    },
    "503": {
        "Retry-After": {
            "description": "Seconds to wait before retrying.",
            "schema": {"type": "integer", "minimum": 1},
        }
    },
    "507": {
        "Retry-After": {
            "description": "Seconds to wait before retrying (space must be freed first).",
            "schema": {"type": "integer", "minimum": 1},
        }
    },
}


class BoundedNinjaAPI(NinjaAPI):
    """A NinjaAPI whose schema states the settings' bounds and every operation's errors."""

    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None
    ) -> OpenAPISchema:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        _settle_bounds(schema)
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                if isinstance(operation, dict) and "responses" in operation:
                    _document_errors(operation)
        return schema

    def get_openapi_operation_id(self, operation: Operation) -> str:
        """The handler's name after its router's stable prefix (``links.OPERATION_PREFIX``)."""
        view = operation.view_func
        return OPERATION_PREFIX[view.__module__] + view.__name__


def _settle_bounds(node: Any) -> None:
    """Replace each marker with its setting's value, on the string (or array) branch."""
    if isinstance(node, list):
        for item in node:
            _settle_bounds(item)
        return
    if not isinstance(node, dict):
        return
    for marker, keyword in _MARKERS.items():
        setting = node.pop(marker, None)
        if setting is not None:
            bound = int(getattr(settings, setting))
            wanted = "string" if keyword == "maxLength" else "array"
            branches = [b for b in node.get("anyOf", []) if b.get("type") == wanted]
            for target in branches or [node]:
                target[keyword] = bound
            node["description"] = (
                node.get("description", "") + f" At most {bound} ({setting})."
            ).strip()
    for child in node.values():
        _settle_bounds(child)


def _document_errors(operation: dict[str, Any]) -> None:
    # ninja keys responses by int status until the schema is rendered as JSON.
    responses = operation["responses"]
    statuses = {str(status): status for status in responses}
    authenticated = operation.get("security") is not None or "401" in statuses
    if authenticated and "429" not in statuses:
        # Any authenticated operation may answer 429: bad tokens are counted per address.
        responses[429] = {
            "description": "Too many failed authentications from this address",
            "content": {"application/json": {"schema": dict(_ERROR_REF)}},
        }
        statuses["429"] = 429
    for status, headers in _HEADERS.items():
        if status in statuses:
            responses[statuses[status]].setdefault("headers", {}).update(headers)

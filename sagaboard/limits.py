"""What an agent may send, and how much: the API's limits in one place (README, "Limits").

Every limit is a setting (``SAGABOARD_MAX_*``, read at request time so a test can change
it). A request over one is refused as a whole with a 4xx whose JSON body names the field
and the limit, before anything is stored:

- the body: ``SAGABOARD_API_MAX_BODY`` bytes, 413 (``sagaboard.body_limit`` in front of
  Django, so an oversized upload is cut off while it arrives);
- JSON values (a step's input and output, metadata, saga state and options, undo args):
  nested at most ``SAGABOARD_MAX_JSON_DEPTH`` levels, and at most
  ``SAGABOARD_MAX_VALUE_SIZE`` characters as compact JSON; long texts (errors,
  tracebacks, notes) at most ``SAGABOARD_MAX_VALUE_SIZE`` characters: 422;
- steps in one saga: ``SAGABOARD_MAX_STEPS``, 422 ``limit_exceeded``;
- events in one batch: ``SAGABOARD_API_MAX_BATCH``, 422;
- names and ids: fixed by their columns (``schemas.Name``, ``schemas.ID``), 422.

JSON that is not JSON (``NaN``, ``Infinity``) or that nests past what Python's parser can
take is refused by ``JsonParser`` (400 / 422), not stored and then failed on the way out.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from django.conf import settings
from django.http import HttpRequest
from ninja.parser import Parser
from pydantic import AfterValidator, ValidationInfo
from pydantic_core import PydanticCustomError


def max_json_depth() -> int:
    return int(settings.SAGABOARD_MAX_JSON_DEPTH)


def max_value_size() -> int:
    return int(settings.SAGABOARD_MAX_VALUE_SIZE)


def max_steps() -> int:
    return int(settings.SAGABOARD_MAX_STEPS)


class NotJson(ValueError):
    """The body parses only as Python's JSON superset (NaN, Infinity), or nests too deep."""


def _no_constants(name: str) -> Any:
    raise NotJson(f"{name} is not a JSON value")


class JsonParser(Parser):
    """Strict JSON bodies: no NaN/Infinity (they cannot be stored or sent back as JSON)."""

    def parse_body(self, request: HttpRequest) -> Any:
        try:
            return json.loads(request.body, parse_constant=_no_constants)
        except RecursionError as err:
            raise NotJson(
                f"the body nests deeper than {max_json_depth()} levels (SAGABOARD_MAX_JSON_DEPTH)"
            ) from err


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests deeper than ``limit`` levels (a scalar is level 0)."""
    level = [(value, 0)]
    while level:
        item, depth = level.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        level.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _body_size(info: ValidationInfo) -> int | None:
    """The size of the request body being validated (ninja passes the request as context)."""
    request = info.context.get("request") if isinstance(info.context, dict) else None
    return len(request.body) if isinstance(request, HttpRequest) else None


def _check_json(value: Any, info: ValidationInfo) -> Any:
    if not isinstance(value, dict | list):
        if isinstance(value, str):
            _check_text(value)
        return value
    depth = max_json_depth()
    if _depth_over(value, depth):
        raise PydanticCustomError(
            "too_deep",
            "nested deeper than {limit} levels (SAGABOARD_MAX_JSON_DEPTH)",
            {"limit": depth},
        )
    # A value is never larger than the body it came in: a small body skips the measuring.
    size, body = max_value_size(), _body_size(info)
    if body is None or body > size:
        written = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
        if written > size:
            raise _too_large(size)
    return value


def _check_text(value: str | None) -> str | None:
    if value is not None:
        size = max_value_size()
        if len(value) > size:
            raise _too_large(size)
    return value


def _too_large(size: int) -> PydanticCustomError:
    return PydanticCustomError(
        "too_large", "larger than {limit} characters (SAGABOARD_MAX_VALUE_SIZE)", {"limit": size}
    )


JsonValue = Annotated[Any, AfterValidator(_check_json)]
"""A JSON value the server stores: depth and size within the limits."""
JsonObject = Annotated[dict[str, Any], AfterValidator(_check_json)]
"""A JSON object the server stores: depth and size within the limits."""
LongText = Annotated[str, AfterValidator(_check_text)]
"""Free text the server stores (an error, a traceback, a note): size within the limit."""

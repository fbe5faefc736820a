"""What an agent may send, and how much: the API's limits in one place (README, "Limits").

Every limit is a setting (``SAGABOARD_MAX_*``, read at request time so a test can change
it). A request over one is refused as a whole with a 4xx whose JSON body names the field
and the limit, before anything is stored:

- the body: ``SAGABOARD_API_MAX_BODY`` bytes, 413 (``sagaboard.infra.http.body_limit`` in front of
  Django, so an oversized upload is cut off while it arrives);
- JSON values (a step's input and output, metadata, saga state and options, undo args):
  nested at most ``SAGABOARD_MAX_JSON_DEPTH`` levels, and at most
  ``SAGABOARD_MAX_VALUE_SIZE`` characters as compact JSON; long texts (errors,
  tracebacks, notes) at most ``SAGABOARD_MAX_VALUE_SIZE`` characters: 422;
- steps in one saga: ``SAGABOARD_MAX_STEPS``, 422 ``limit_exceeded``;
- events in one batch: ``SAGABOARD_API_MAX_BATCH``, 422, counted before any event is read
  (``batch_problem``), so a refused batch costs no more than the body's parse;
- names and ids: fixed by their columns (``schemas.Name``, ``schemas.identifier``), and
  what they may hold by the text policy (``sagaboard.infra.text_policy``), 422;
- integers: their columns' ranges (``schemas.INT``, ``schemas.BIGINT``), 422.

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

from sagaboard.errors import ServiceError
from sagaboard.infra.http.json_body import NotJson, parse_json

BIGINT = 2**63 - 1
"""The largest value of a BigIntegerField (a saga's or an event's ``seq``, a row id)."""
INT = 2**31 - 1
"""The largest value of an IntegerField on PostgreSQL (positions, step and attempt numbers)."""


def max_json_depth() -> int:
    return int(settings.SAGABOARD_MAX_JSON_DEPTH)


def max_value_size() -> int:
    return int(settings.SAGABOARD_MAX_VALUE_SIZE)


def max_steps() -> int:
    return int(settings.SAGABOARD_MAX_STEPS)


def max_batch() -> int:
    return int(settings.SAGABOARD_API_MAX_BATCH)


def batch_problem(count: int) -> str | None:
    """What is wrong with a batch of ``count`` events (too many), or None."""
    limit = max_batch()
    if count <= limit:
        return None
    return f"at most {limit} events per batch (SAGABOARD_API_MAX_BATCH), not {count}"


class JsonParser(Parser):
    """Strict JSON bodies: no NaN/Infinity (they cannot be stored or sent back as JSON).

    The parsed body stays on the request: ingestion hashes each event as it was sent.
    """

    def parse_body(self, request: HttpRequest) -> Any:
        try:
            data = parse_json(request.body)
        except RecursionError as err:
            raise NotJson(_too_deep()) from err
        except ValueError as err:
            if "recursion limit" in str(err):  # orjson's own nesting limit
                raise NotJson(_too_deep()) from err
            raise
        request.parsed_body = data  # type: ignore[attr-defined]
        return data


def _too_deep() -> str:
    return f"the body nests deeper than {max_json_depth()} levels (SAGABOARD_MAX_JSON_DEPTH)"


def _depth_over(value: dict[str, Any] | list[Any], limit: int) -> bool:
    """Whether ``value`` (a container: level 1) nests deeper than ``limit`` levels."""
    # Plain recursion, at most `limit` deep: the common case, a flat object of scalars,
    # costs one loop of type checks (this runs for every value of every event).
    child: Any  # a dict or a list when it nests (checked by type, the fast way)
    for child in value.values() if type(value) is dict else value:
        nests = type(child) is dict or type(child) is list
        if nests and (limit <= 1 or _depth_over(child, limit - 1)):
            return True
    return False


def _body_size(info: ValidationInfo) -> int | None:
    """The size of the request body being validated (ninja passes the request as context)."""
    request = info.context.get("request") if isinstance(info.context, dict) else None
    return len(request.body) if isinstance(request, HttpRequest) else None


def value_problem(value: Any, *, depth: int, size: int, measure: bool) -> str | None:
    """What is wrong with a JSON value the server would store, or None.

    ``measure``: whether to measure its size. A value is never (much) larger than the body
    it came in, so a body within the size limit spares it (the default limit is the body's).
    """
    if type(value) is str:
        return text_problem(value, size)
    if type(value) is not dict and type(value) is not list:
        return None
    if depth < 1 or _depth_over(value, depth):
        return f"nested deeper than {depth} levels (SAGABOARD_MAX_JSON_DEPTH)"
    if measure and len(json.dumps(value, ensure_ascii=False, separators=(",", ":"))) > size:
        return too_large(size)
    return None


def text_problem(value: str, size: int) -> str | None:
    return too_large(size) if len(value) > size else None


def too_large(size: int) -> str:
    return f"larger than {size} characters (SAGABOARD_MAX_VALUE_SIZE)"


def _check_json(value: Any, info: ValidationInfo) -> Any:
    size, body = max_value_size(), _body_size(info)
    problem = value_problem(
        value, depth=max_json_depth(), size=size, measure=body is None or body > size
    )
    if problem is not None:
        raise PydanticCustomError("limit", problem)
    return value


class InputRefused(ServiceError):
    """A value refused in a pass over a whole batch, where pydantic could not name the field
    (its errors carry the location of the validator): the API answers 422 with both."""

    def __init__(self, message: str, field: str, index: int | None = None) -> None:
        super().__init__(422, "validation_error", message, field, index=index)


JsonValue = Annotated[Any, AfterValidator(_check_json)]
"""A JSON value the server stores: depth and size within the limits."""
JsonObject = Annotated[dict[str, Any], AfterValidator(_check_json)]
"""A JSON object the server stores: depth and size within the limits."""

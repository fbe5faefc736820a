"""Typed reads of environment variables, for the settings.

Every variable the settings read goes through one of these, so a bad value stops the
start with ``ImproperlyConfigured`` naming the variable and what it must be, instead of a
bare ``ValueError`` (or a silently wrong default) far from its cause. An unset or empty
variable takes its default. Nothing here touches Django's settings: the settings module
itself imports it.
"""

from __future__ import annotations

import math
import os

from django.core.exceptions import ImproperlyConfigured

__all__ = ["env_bool", "env_choice", "env_float", "env_int", "env_list", "env_seconds", "env_str"]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _raw(name: str) -> str:
    return os.environ.get(name, "").strip()


def _refuse(name: str, raw: str, must: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{name} must be {must}, not {raw!r}.")


def env_str(name: str, default: str = "") -> str:
    """The variable's text, stripped (unset or empty: ``default``)."""
    return _raw(name) or default


def env_bool(name: str, default: bool) -> bool:
    """1/true/yes/on or 0/false/no/off (any case); anything else is refused, so a typo
    such as ``SAGABOARD_HTTPS=ture`` does not quietly turn a protection off."""
    raw = _raw(name)
    if not raw:
        return default
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise _refuse(name, raw, "1 or 0 (also true/false, yes/no, on/off)")


def _bounds(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f" from {minimum:g} to {maximum:g}"
    if minimum is not None:
        return f" ({minimum:g} or more)"
    if maximum is not None:
        return f" ({maximum:g} or less)"
    return ""


def env_int(name: str, default: int, *, minimum: int | None = None,
            maximum: int | None = None) -> int:  # fmt: skip
    """A whole number within the bounds (unset or empty: ``default``)."""
    raw = _raw(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _refuse(name, raw, "a whole number" + _bounds(minimum, maximum)) from None
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise _refuse(name, raw, "a whole number" + _bounds(minimum, maximum))
    return value


def env_float(name: str, default: float, *, minimum: float | None = None,
              maximum: float | None = None, what: str = "a number") -> float:  # fmt: skip
    """A finite number within the bounds (unset or empty: ``default``); nan and inf are
    refused (``nan`` passes every comparison)."""
    raw = _raw(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if (
        not math.isfinite(value)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        raise _refuse(name, raw, what + _bounds(minimum, maximum))
    return value


def env_seconds(name: str, default: float) -> float:
    """A duration in seconds, 0 or more."""
    return env_float(name, default, minimum=0, what="a number of seconds")


def env_list(name: str, default: str = "") -> list[str]:
    """A comma-separated list, items stripped, empty items dropped."""
    return [item.strip() for item in (_raw(name) or default).split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (unset or empty: ``default``)."""
    raw = _raw(name)
    if not raw:
        return default
    if raw not in choices:
        raise _refuse(name, raw, "one of " + ", ".join(choices))
    return raw


def env_link_template(name: str, fields: tuple[str, ...]) -> str:
    """An http(s) link with ``{field}`` placeholders (only those named), or "" when unset.

    Checked at start, so a typo (``{traceid}``) is an error naming the variable, not a
    500 on the first page that draws the link.
    """
    raw = _raw(name)
    if not raw:
        return ""
    must = f"an http(s) URL whose only placeholders are {', '.join('{' + f + '}' for f in fields)}"
    if not raw.startswith(("http://", "https://")):
        raise _refuse(name, raw, must)
    try:
        raw.format(**dict.fromkeys(fields, "x"))
    except (KeyError, IndexError, ValueError):
        raise _refuse(name, raw, must) from None
    return raw

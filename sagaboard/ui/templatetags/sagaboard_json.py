"""``{{ value|as_json }}``: a stored JSON value shown as JSON (see ``sagaboard.ui.present``)."""

from __future__ import annotations

from typing import Any

from django import template

from sagaboard.ui.present import json_text

register = template.Library()


@register.filter
def as_json(value: Any) -> str:
    """Indented JSON text, escaped by the template like any text (never marked safe)."""
    return json_text(value)

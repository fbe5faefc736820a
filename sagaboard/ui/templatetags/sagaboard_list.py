"""``{{ saga.duration_ms|duration }}``: a duration as people read it ("2 h 5 min", "350 ms")."""

from __future__ import annotations

from django import template

from sagaboard.ui import times

register = template.Library()


@register.filter
def duration(ms: int | None) -> str:
    """Milliseconds as every page writes a duration (static/sagaboard/durations.js writes
    running sagas' the same way)."""
    return "" if ms is None else times.duration_text(max(0, int(ms)) / 1000)

"""``{{ saga.duration_ms|duration }}``: a duration as people read it ("2 h 5 min", "350 ms")."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def duration(ms: int | None) -> str:
    """Milliseconds as the two largest units that matter (static/sagaboard/durations.js
    writes running sagas' the same way)."""
    if ms is None:
        return ""
    ms = max(0, int(ms))
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms // 1000
    if seconds < 60:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"

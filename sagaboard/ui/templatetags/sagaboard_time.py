"""``{% when t "received" %}``: one time, labelled, for every page (a builtin).

Arguments after the kind (``sagaboard.ui.times.KINDS``): ``saga=`` the saga a reported time
belongs to (whose clock it is), ``precise=True`` for a log's times (the exact time with
milliseconds stays the text; how long ago goes to the detail), ``bare=True`` in a table
column whose header already says what and whose clock, ``none="never"`` for a time not set.

The server writes the exact UTC time inside ``<time datetime>``; ``static/sagaboard/times.js``
turns it into the reader's zone and "3 min ago", the exact time in ``.when-detail``
(shown on hover and focus, and the ``<time>``'s ``aria-describedby``).

``{% time_zone_toggle %}``: the header's UTC / local switch, pressed as the cookie says.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from typing import Any

from django import template
from django.utils.safestring import SafeString, mark_safe

from sagaboard.ui import times

register = template.Library()


@register.simple_tag
def when(
    value: datetime | None,
    kind: str,
    *,
    saga: Any = None,
    precise: bool = False,
    bare: bool = False,
    none: str = "—",
) -> SafeString:
    if value is None or value == "":
        times.when(datetime(2000, 1, 1), kind)  # an unknown kind fails even when unset
        return mark_safe(f'<span class="when when-none">{escape(none)}</span>')
    w = times.when(value, kind, saga=saga, precise=precise)
    what, clock_text = escape(w.what), escape(w.clock_text)  # from KINDS: plain, escaped anyway
    label = "" if bare else f'<span class="when-what">{what}</span> '
    clock = "" if bare else f' <span class="when-clock">({clock_text})</span>'
    mode = "exact" if precise else "relative"
    return mark_safe(
        f'<span class="when{" when-bare" if bare else ""}" data-clock="{w.clock}">{label}'
        f'<time datetime="{w.iso}" data-when="{mode}" data-what="{what}"'
        f' data-clock-text="{clock_text}" tabindex="0">{w.exact}</time>{clock}'
        f'<span class="when-detail">{what} · {clock_text}: {w.exact}</span></span>'
    )


@register.filter
def iso(value: datetime | None) -> str:
    """A time as a machine reads it (``<time datetime>``, ``data-started``): UTC ISO 8601."""
    return "" if value is None else times.iso(value)


@register.inclusion_tag("sagaboard/_time_toggle.html", takes_context=True)
def time_zone_toggle(context: template.Context) -> dict[str, Any]:
    request = context.get("request")
    return {"zone": times.zone_choice(getattr(request, "COOKIES", None))}


@register.simple_tag(takes_context=True)
def time_zone(context: template.Context) -> str:
    """``utc`` or ``local``, for ``<html data-tz>`` (times.js reads it before anything)."""
    request = context.get("request")
    return times.zone_choice(getattr(request, "COOKIES", None))

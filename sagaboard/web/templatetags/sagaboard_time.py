"""``{% when t "received" %}``: one time, labelled, for every page (a builtin).

Arguments after the kind (``sagaboard.web.times.KINDS``): ``saga=`` the saga a reported time
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
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from sagaboard.web import times

register = template.Library()

_TIME = (
    '<span class="when{}" data-clock="{}">{}'
    '<time datetime="{}" data-when="{}" data-what="{}" data-clock-text="{}" tabindex="0">{}</time>'
    '{}<span class="when-detail">{} · {}: {}</span></span>'
)


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
        return format_html('<span class="when when-none">{}</span>', none)
    w = times.when(value, kind, saga=saga, precise=precise)
    what = "" if bare else format_html('<span class="when-what">{}</span> ', w.what)
    clock = "" if bare else format_html(' <span class="when-clock">({})</span>', w.clock_text)
    return format_html(
        _TIME,
        " when-bare" if bare else "",
        w.clock,
        what,
        w.iso,
        "exact" if precise else "relative",
        w.what,
        w.clock_text,
        w.exact,
        clock,
        w.what,
        w.clock_text,
        w.exact,
    )


@register.inclusion_tag("sagaboard/_time_toggle.html", takes_context=True)
def time_zone_toggle(context: template.Context) -> dict[str, Any]:
    request = context.get("request")
    return {"zone": times.zone_choice(getattr(request, "COOKIES", None))}


@register.simple_tag(takes_context=True)
def time_zone(context: template.Context) -> str:
    """``utc`` or ``local``, for ``<html data-tz>`` (times.js reads it before anything)."""
    request = context.get("request")
    return times.zone_choice(getattr(request, "COOKIES", None))

"""Template filters for the text policy (``sagaboard.infra.text_policy``), loaded as a builtin.

``{{ saga.saga_id|visible }}``: the value escaped, with every invisible, bidi-control or
blank-looking character shown as a marker (``⟨U+202E⟩``), so two ids or names that differ
only there never look the same on an operator's screen. For element content only (the
marker is HTML); attributes keep plain ``{{ value }}``.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from sagaboard.infra import text_policy
from sagaboard.ui import markdown_text

register = template.Library()


@register.filter(is_safe=True)
def visible(value: Any) -> SafeString:
    return text_policy.visible(value)


@register.filter(is_safe=True)
def markdown(value: Any) -> SafeString:
    """A note's Markdown as HTML, every character of the text escaped (``markdown_text``)."""
    return markdown_text.render(str(value or ""))

"""Reading the status badges a page shows (``templates/sagaboard/_status.html`` and
``_saga_status.html``): a status is checked as a badge's whole text, so FAILED never
matches ROLLBACK_FAILED and COMPLETED never matches a saga or step id that contains it."""

from __future__ import annotations

import re

_BADGE = re.compile(
    r'<span class="status [^"]*"[^>]*><span aria-hidden="true" class="dot"></span>([^<]*)</span>'
)


def status_texts(html: str) -> list[str]:
    """The text of every status badge in ``html``, in page order."""
    return _BADGE.findall(html)

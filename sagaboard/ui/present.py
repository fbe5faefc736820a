"""How stored values are shown to people: JSON, as the agent sent it, never a Python repr.

Inputs, outputs, undo arguments and audit details are JSON values; printed
with Python's ``repr`` (``pprint``, ``str``) they read ``True``/``None``/``'x'``,
which is neither what the agent sent nor what the API returns. One function
prints them everywhere (pages, live fragments, the audit log and its CSV), so
an operator reads the same text wherever the value appears.
"""

from __future__ import annotations

import json
from typing import Any


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON text: keys in their stored order, non-ASCII kept as it is.

    ``indent=None`` gives one line (a CSV cell). The result is plain text: templates
    escape it like any other text. A value JSON cannot hold (never stored by
    sagaboard, but a page must not fail over one) is shown by its ``str``.
    """
    return json.dumps(value, indent=indent, ensure_ascii=False, default=str)

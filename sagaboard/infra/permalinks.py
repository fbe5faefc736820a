"""Stable addresses of what an operator links to: a saga, a step, an approval, an audit entry.

A step's anchor is built from its ``step_id`` (the agent's own name, ``#step-step-3``), never
a database key, so a link pasted in a ticket still finds the step after a restore or a
re-import. Step ids are identifiers (``text_policy``: no control or invisible character) but
may hold spaces, quotes, ``#``, ``%`` or non-ASCII letters: the anchor percent-encodes every
character outside ``A-Z a-z 0-9 - . _ ~``. The result is the same text in the element's
``id`` and in the link's fragment (a browser matches the fragment as written first), holds
nothing HTML or a URL would read specially, and is one-to-one (``%`` itself is encoded), so
two steps never share an anchor. The ``step-`` prefix keeps a step named like another
element of the page (``saga-live-7``) from taking that element's id.
"""

from __future__ import annotations

from urllib.parse import quote

from django.urls import reverse

STEP_PREFIX = "step-"
APPROVAL_PREFIX = "approval-"
ENTRY_PREFIX = "entry-"


def step_anchor(step_id: str) -> str:
    """The step card's ``id`` and the fragment that finds it: ``step-`` + the encoded id."""
    return STEP_PREFIX + quote(step_id, safe="")


def approval_anchor(pk: int) -> str:
    return f"{APPROVAL_PREFIX}{int(pk)}"


def entry_anchor(pk: int) -> str:
    return f"{ENTRY_PREFIX}{int(pk)}"


def saga_path(project_slug: str, saga_id: str) -> str:
    return reverse("saga_detail", args=[project_slug, saga_id])


def step_path(project_slug: str, saga_id: str, step_id: str) -> str:
    """The saga page, scrolled to the step's card."""
    return f"{saga_path(project_slug, saga_id)}#{step_anchor(step_id)}"


def approval_path(pk: int) -> str:
    """An approval's own address, pending or decided: it leads to its record on the saga page."""
    return reverse("approval_permalink", args=[int(pk)])


def entry_path(pk: int) -> str:
    """The audit page showing that one entry (a filter: it stays there when newer ones come)."""
    return f"{reverse('audit')}?entry={int(pk)}#{entry_anchor(pk)}"

"""``{% action "RETRY" %}``: an action's wire value, from undo_core's ``DecisionAction``.

A builtin tag.

A button's ``value`` and a link's ``?action=`` name the enum member, never the string it
stands for: the pages, the API's schemas and the services all read the one vocabulary. An
unknown name fails the render (``KeyError``), so a misspelling cannot ship.
"""

from __future__ import annotations

from django import template

from undo_core import DecisionAction

register = template.Library()


@register.simple_tag
def action(name: str) -> str:
    return DecisionAction[name].value

"""Permalinks in templates (``sagaboard.infra.permalinks``): ``{% load sagaboard_links %}``.

``{{ step.step_id|step_anchor }}`` is a step card's id and the fragment that finds it;
``{% step_url saga step.step_id %}`` the saga page at that step. What they return holds only
``A-Z a-z 0-9 - . _ ~ %`` (and the path's own characters, which ``reverse`` quotes), and is
escaped by the template all the same.
"""

from __future__ import annotations

from typing import Any

from django import template

from sagaboard.infra import permalinks
from sagaboard.models import Saga
from sagaboard.ui import trace_links

register = template.Library()


@register.filter
def step_anchor(step_id: str) -> str:
    return permalinks.step_anchor(str(step_id))


@register.filter
def approval_anchor(pk: int) -> str:
    return permalinks.approval_anchor(pk)


@register.filter
def entry_anchor(pk: int) -> str:
    return permalinks.entry_anchor(pk)


@register.simple_tag
def step_url(saga: Saga, step_id: str) -> str:
    return permalinks.step_path(saga.project.slug, saga.saga_id, step_id)


@register.simple_tag
def saga_url(saga: Saga) -> str:
    return permalinks.saga_path(saga.project.slug, saga.saga_id)


@register.simple_tag
def approval_url(pk: int) -> str:
    return permalinks.approval_path(pk)


@register.simple_tag
def entry_url(pk: int) -> str:
    return permalinks.entry_path(pk)


@register.simple_tag
def step_trace_url(step: Any) -> str | None:
    """``{% step_trace_url step as url %}``: its span in the site's tracing tool, or None."""
    return trace_links.step_trace_url(step.metadata)


@register.simple_tag
def saga_trace_url(steps: Any) -> str | None:
    """``{% saga_trace_url steps as url %}``: the saga's trace, or None."""
    return trace_links.saga_trace_url(step for step, _ in steps)

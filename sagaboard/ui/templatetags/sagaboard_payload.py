"""A step's payloads drawn as JSON trees and diffs (``sagaboard.ui.payloads`` decides).

``{% step_payloads step saga as p %}`` gives the saga page's ``timeline-step`` partial what
it lays out (``templates/sagaboard/_payload.html``): ``p.input``/``p.output`` (the trees'
HTML), ``p.io_diff`` (input → output), ``p.attempt_diffs`` and the raw downloads' links.

The tree's HTML is written here, not by a recursive template: a saga of 1,000 steps draws
thousands of nodes, and an ``{% include %}`` (or even a ``format_html``) per node costs
tens of times more (``python -m benchmarks.payload_trees``). Every key, value and path
goes through ``html.escape`` or the text policy's ``visible`` (escaped, invisible and bidi
characters shown as ``⟨U+202E⟩``); nothing is marked safe unescaped.
Nodes are nested ``<details>``/``<summary>``, so the tree folds without JavaScript;
``static/sagaboard/payload.js`` runs the copy buttons.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

from django import template
from django.conf import settings
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from sagaboard.infra.text_policy import visible
from sagaboard.ui import payloads, times

register = template.Library()

OPEN_DEPTH = 2
"""Nodes this shallow start unfolded."""


def payload_url(saga: Any, step_id: str, part: str) -> str:
    """Where the raw JSON of a step's ``part`` (input, output, attempts) downloads from."""
    return reverse(
        "step_payload",
        kwargs={
            "project": saga.project.slug,
            "saga_id": saga.saga_id,
            "step_id": step_id,
            "part": part,
        },
    )


def _attr(text: str) -> str:
    return escape(text, quote=True)


def _shown(text: str) -> str:
    """``visible(text)``, with its common case (printable ASCII, no space at either end nor
    two in a row: nothing to mark) done here without Django's lazy wrapper: same output."""
    plain = text.isascii() and text.isprintable() and "  " not in text
    if plain and text[:1] != " " and text[-1:] != " ":
        return escape(text, quote=True)
    return str(visible(text))


def _buttons(node: payloads.Node, path: str) -> str:
    html = (
        f'<button type="button" class="jt-copy" data-copy="{path}" data-copy-what="path"'
        f' aria-label="Copy the path {path}">path</button>'
    )
    if node.copy is None:
        return html
    return html + (
        f'<button type="button" class="jt-copy" data-copy="{_attr(node.copy)}"'
        f' data-copy-what="value" aria-label="Copy the value of {path}">value</button>'
    )


def _key(node: payloads.Node, path: str) -> str:
    if node.key is None:
        return f'<span class="jt-key jt-root-key">{path}</span>'
    if node.index:
        return f'<span class="jt-index">[{node.key}]</span>'
    return f'<span class="jt-key">{_shown(node.key)}</span>'


def _scalar(node: payloads.Node, download: str) -> str:
    if node.kind == payloads.STRING:
        cut = ""
        if node.cut:
            cut = (
                f' <span class="jt-cut">… truncated: {node.cut} more characters'
                f' (<a href="{_attr(download)}" download>raw JSON</a>)</span>'
            )
        return (
            f'<span class="jt-string"><span class="jt-quote">"</span>{_shown(node.text)}'
            f'<span class="jt-quote">"</span></span>{cut}'
        )
    return f'<span class="jt-{node.kind}">{_attr(node.text)}</span>'


def _empty(node: payloads.Node) -> str:
    mark = "{}" if node.kind == payloads.OBJECT else "[]"
    return f'<span class="jt-empty">{mark} <span class="jt-type">empty {node.kind}</span></span>'


def _node(node: payloads.Node, depth: int, download: str, out: list[str]) -> None:
    """Append ``node``'s HTML to ``out`` (one list for the whole tree: no string copies)."""
    path = _attr(node.path)
    head = f'{_key(node, path)}<span class="jt-colon">:</span> '
    container = node.kind in (payloads.OBJECT, payloads.ARRAY)
    if not container or (not node.children and not node.more):
        value = _empty(node) if container else _scalar(node, download)
        out.append(
            f'<div class="jt-leaf" data-path="{path}">{head}{value} {_buttons(node, path)}</div>'
        )
        return
    brace = "{…}" if node.kind == payloads.OBJECT else "[…]"
    opened = " open" if depth < OPEN_DEPTH else ""
    out.append(
        f'<details class="jt-node" data-path="{path}"{opened}><summary>{head}'
        f'<span class="jt-brace">{brace}</span> <span class="jt-type">{node.kind}, {node.text}'
        f'</span> {_buttons(node, path)}</summary><ul class="jt-children">'
    )
    for child in node.children:
        out.append("<li>")
        _node(child, depth + 1, download, out)
        out.append("</li>")
    if node.more:
        out.append(
            f'<li class="jt-more">truncated: {node.more} more (<a href="{_attr(download)}"'
            " download>download the raw JSON</a>)</li>"
        )
    out.append("</ul></details>")


def tree_html(
    value: Any, root: str, download: str, limits: payloads.Limits | None = None
) -> SafeString:
    """The whole tree of ``value``, with a note and the download link if it was cut.

    Every piece of text in it went through ``escape`` or ``visible`` above."""
    drawn = payloads.tree(value, root, limits)
    out = ['<div class="json-tree">']
    if drawn.truncated:
        out.append(
            '<p class="jt-truncated">Too large to show whole: parts are truncated. '
            f'<a href="{_attr(download)}" download>Download the raw JSON</a>.</p>'
        )
    _node(drawn.root, 0, download, out)
    out.append("</div>")
    return mark_safe("".join(out))


@dataclass
class StepPayloads:
    input: SafeString | None
    output: SafeString | None
    io_diff: payloads.Diff | None
    input_url: str
    output_url: str
    lazy_url: str = ""
    """Set when the saga is too long to draw every step's trees in its page: the trees
    load from here when the reader opens them (htmx; a link without JavaScript)."""


def payloads_url(saga: Any, step_id: str) -> str:
    """The page (and htmx fragment) of one step's trees and their diff."""
    return reverse(
        "step_trees",
        kwargs={"project": saga.project.slug, "saga_id": saga.saga_id, "step_id": step_id},
    )


def draws_inline(saga: Any) -> bool:
    """Whether the saga page draws each step's trees itself (``SAGABOARD_PAYLOAD_INLINE_STEPS``):
    past that, a page and every live update of it would carry thousands of nodes."""
    return len(saga.steps.all()) <= settings.SAGABOARD_PAYLOAD_INLINE_STEPS


@register.simple_tag
def step_payloads(step: Any, saga: Any, inline: bool = False) -> StepPayloads:
    """The step's input and output trees and their diff (none without an output); only
    their links (``lazy_url``) in the page of a long saga, unless ``inline``."""
    urls = {part: payload_url(saga, step.step_id, part) for part in ("input", "output")}
    if inline is not True and not draws_inline(saga):
        return StepPayloads(None, None, None, urls["input"], urls["output"],
                            payloads_url(saga, step.step_id))  # fmt: skip
    limits = payloads.Limits.from_settings()
    has_output = step.output is not None
    return StepPayloads(
        input=tree_html(step.input, "input", urls["input"], limits),
        output=tree_html(step.output, "output", urls["output"], limits) if has_output else None,
        io_diff=payloads.diff(step.input, step.output, limits) if has_output else None,
        input_url=urls["input"],
        output_url=urls["output"],
    )


@dataclass
class StepAttempts:
    attempt_diffs: list[payloads.AttemptDiff]
    attempts_url: str


@register.simple_tag
def step_attempts(step: Any, saga: Any) -> StepAttempts:
    """Each undo attempt against the one before, and where they download."""
    return StepAttempts(
        attempt_diffs=payloads.attempt_diffs(list(step.attempts.all())),
        attempts_url=payload_url(saga, step.step_id, "attempts"),
    )


@register.filter
def duration(attempt: Any) -> str:
    """How long an undo attempt took (``times.duration_text``); ``running`` if unfinished."""
    if attempt.finished_at is None:
        return "running"
    return times.duration_text((attempt.finished_at - attempt.started_at).total_seconds())

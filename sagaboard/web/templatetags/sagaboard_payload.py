"""A step's payloads drawn as JSON trees and diffs (``sagaboard.web.payloads`` decides).

``{% step_payloads step saga as p %}`` gives the saga page's ``timeline-step`` partial what
it lays out (``templates/sagaboard/_payload.html``): ``p.input``/``p.output`` (the trees'
HTML), ``p.io_diff`` (input → output), ``p.attempt_diffs`` and the raw downloads' links.

The tree's HTML is written here, not by a recursive template: a saga of 1,000 steps draws
thousands of nodes, and an ``{% include %}`` per node costs tens of times more. Every key
and value goes through ``format_html`` and the text policy's ``visible`` (escaped,
invisible and bidi characters shown as ``⟨U+202E⟩``); nothing is marked safe unescaped.
Nodes are nested ``<details>``/``<summary>``, so the tree folds without JavaScript;
``static/sagaboard/payload.js`` runs the copy buttons.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import template
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from sagaboard.infra.text_policy import visible
from sagaboard.web import payloads

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


def _buttons(node: payloads.Node) -> SafeString:
    path = format_html(
        '<button type="button" class="jt-copy" data-copy="{}" data-copy-what="path"'
        ' aria-label="Copy the path {}">path</button>',
        node.path,
        node.path,
    )
    if node.copy is None:
        return path
    return format_html(
        '{}<button type="button" class="jt-copy" data-copy="{}" data-copy-what="value"'
        ' aria-label="Copy the value of {}">value</button>',
        path,
        node.copy,
        node.path,
    )


def _key(node: payloads.Node) -> SafeString:
    if node.key is None:
        return format_html('<span class="jt-key jt-root-key">{}</span>', node.path)
    if node.index:
        return format_html('<span class="jt-index">[{}]</span>', node.key)
    return format_html('<span class="jt-key">{}</span>', visible(node.key))


def _scalar(node: payloads.Node, download: str) -> SafeString:
    if node.kind == payloads.STRING:
        cut = ""
        if node.cut:
            cut = format_html(
                ' <span class="jt-cut">… truncated: {} more characters (<a href="{}" download>'
                "raw JSON</a>)</span>",
                node.cut,
                download,
            )
        return format_html(
            '<span class="jt-string"><span class="jt-quote">"</span>{}'
            '<span class="jt-quote">"</span></span>{}',
            visible(node.text),
            cut,
        )
    return format_html('<span class="jt-{}">{}</span>', node.kind, node.text)


def _empty(node: payloads.Node) -> SafeString:
    mark = "{}" if node.kind == payloads.OBJECT else "[]"
    return format_html('<span class="jt-empty">{} <span class="jt-type">empty {}</span></span>',
                       mark, node.kind)  # fmt: skip


def _node(node: payloads.Node, depth: int, download: str) -> SafeString:
    head = format_html('{}<span class="jt-colon">:</span> ', _key(node))
    container = node.kind in (payloads.OBJECT, payloads.ARRAY)
    if not container or (not node.children and not node.more):
        value = _empty(node) if container else _scalar(node, download)
        return format_html(
            '<div class="jt-leaf" data-path="{}">{}{} {}</div>', node.path, head, value,
            _buttons(node),
        )  # fmt: skip
    items = format_html_join(
        "", "<li>{}</li>", ((_node(c, depth + 1, download),) for c in node.children)
    )
    more = ""
    if node.more:
        more = format_html(
            '<li class="jt-more">truncated: {} more (<a href="{}" download>download the raw'
            " JSON</a>)</li>",
            node.more,
            download,
        )
    brace = "{…}" if node.kind == payloads.OBJECT else "[…]"
    return format_html(
        '<details class="jt-node" data-path="{}"{}><summary>{}<span class="jt-brace">{}</span>'
        ' <span class="jt-type">{}, {}</span> {}</summary>'
        '<ul class="jt-children">{}{}</ul></details>',
        node.path,
        mark_safe(" open") if depth < OPEN_DEPTH else "",
        head,
        brace,
        node.kind,
        node.text,
        _buttons(node),
        items,
        more,
    )


def tree_html(
    value: Any, root: str, download: str, limits: payloads.Limits | None = None
) -> SafeString:
    """The whole tree of ``value``, with a note and the download link if it was cut."""
    drawn = payloads.tree(value, root, limits)
    note = ""
    if drawn.truncated:
        note = format_html(
            '<p class="jt-truncated">Too large to show whole: parts are truncated. '
            '<a href="{}" download>Download the raw JSON</a>.</p>',
            download,
        )
    return format_html('<div class="json-tree">{}{}</div>', note, _node(drawn.root, 0, download))


@dataclass
class StepPayloads:
    input: SafeString
    output: SafeString | None
    io_diff: payloads.Diff | None
    input_url: str
    output_url: str


@register.simple_tag
def step_payloads(step: Any, saga: Any) -> StepPayloads:
    """The step's input and output trees and their diff (none without an output)."""
    limits = payloads.Limits.from_settings()
    urls = {part: payload_url(saga, step.step_id, part) for part in ("input", "output")}
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
    """How long an undo attempt took: ``1.234 s``, ``2 min 5 s``; ``running`` if unfinished."""
    if attempt.finished_at is None:
        return "running"
    seconds = (attempt.finished_at - attempt.started_at).total_seconds()
    if seconds < 60:
        return f"{seconds:.3f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"

"""Notes' Markdown as HTML that cannot carry markup of its own (CommonMark, markdown-it-py).

Raw HTML is off (``<script>`` stays text), images are off (a note must not load anything
from elsewhere: the CSP forbids it anyway), headings are off (a note sits inside the page's
own outline); links may only go to http(s), mailto or a path of this site, and carry
``rel="nofollow noopener noreferrer"``. What is left: paragraphs, emphasis, code, lists,
quotes and links.
"""

from __future__ import annotations

from typing import Any

from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

SCHEMES = ("http://", "https://", "mailto:")


def _link_allowed(url: str) -> bool:
    url = url.strip().lower()
    return url.startswith(SCHEMES) or (url.startswith("/") and not url.startswith("//"))


def _md() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False})
    md.disable(["image", "heading", "lheading", "html_block", "html_inline"])
    md.validateLink = _link_allowed  # type: ignore[method-assign]

    def link_open(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        tokens[idx].attrSet("rel", "nofollow noopener noreferrer")
        return str(self.renderToken(tokens, idx, options, env))

    md.add_render_rule("link_open", link_open)
    return md


_MARKDOWN = _md()


def render(text: str) -> SafeString:
    """``text`` (a note's Markdown) as safe HTML."""
    return mark_safe(_MARKDOWN.render(text or ""))  # markdown-it escaped every character

"""One policy for the text sagaboard takes and shows (docs/security.md, "Text").

Two values an operator cannot tell apart on a screen must never be two different
things. So:

- **Identifiers** (saga, step and event ids, tool names, idempotency keys, ids in
  paths) are refused (422, naming the field and the reason) unless they are in
  Unicode NFKC form, hold no control, format, surrogate, private-use, unassigned,
  line/paragraph separator or default-ignorable character (categories Cc, Cf, Cs,
  Co, Cn, Zl, Zp: NUL, zero-width joiners, the right-to-left override...), neither
  start nor end with a space nor hold two in a row, and do not mix the scripts whose
  letters look alike (Latin, Greek, Cyrillic, Armenian, Cherokee, Coptic) or consist
  only of Greek or Cyrillic letters that read as Latin ones (Cyrillic
  ``\\u0430\\u0440\\u0435`` for ``ape``).
  Refusing rather than normalising: the agent keeps the id it sent, and a retry
  with the same bytes finds the same saga.
- **Free text** (names, errors, tracebacks, notes, reasons, actors) is kept exactly
  as sent, except what the databases cannot hold: NUL (PostgreSQL text) and lone
  surrogates (not UTF-8) are refused. A name must also hold a visible character.
- **JSON values** (inputs, outputs, metadata, state, options) are kept as sent, NUL
  included (stored escaped), except lone surrogates (in strings or keys) and
  numbers past a double's range (``1e999``): refused, naming where they are.
- **Rendering**: ``visible`` (the ``visible`` template filter) escapes a value and
  shows every invisible or direction-changing character as a marker (``⟨U+202E⟩``),
  so names that differ only there never look the same on a page.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
"""Unicode general categories no identifier may hold."""

_CATEGORY_NAMES = {
    "Cc": "control",
    "Cf": "invisible format",
    "Cs": "surrogate",
    "Co": "private-use",
    "Cn": "unassigned",
    "Zl": "line separator",
    "Zp": "paragraph separator",
}

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt) outside the refused
# categories: characters that draw nothing though they are letters or marks (Hangul
# fillers, combining grapheme joiner, variation selectors, Khmer inherent vowels).
_IGNORABLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]"
)
# Blank-looking characters that Unicode does not call ignorable: they make no name visible.
_BLANK = frozenset("\u2800\u3000\u00a0\u2007\u202f")

_LOOKALIKE_SCRIPTS = frozenset({"LATIN", "GREEK", "CYRILLIC", "ARMENIAN", "CHEROKEE", "COPTIC"})
# Greek and Cyrillic letters drawn like a Latin letter (after UTS #39's confusables): an
# identifier made only of these reads as Latin text it is not.
_READS_AS_LATIN = frozenset("аеорсухѕіјԁһԛԝӏүАВЕКМНОРСТХУЅІЈԚԜҮοινραυχκΑΒΕΖΗΙΚΜΝΟΡΤΥΧ")

_SURROGATE = re.compile("[\ud800-\udfff]")


class TextRefused(ValueError):
    """A value the policy refuses; ``reason`` completes "<field> ...", ``path`` says where
    inside a JSON value (``""`` for the value itself)."""

    def __init__(self, reason: str, path: str = "") -> None:
        super().__init__(reason)
        self.reason, self.path = reason, path


def describe(char: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``: a character named in ASCII, safe in any message."""
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


def _plain_ascii(value: str) -> bool:
    # The common case, checked in a few C calls: printable ASCII, no space at either end
    # and no two in a row. Nothing else needs looking at.
    return (
        value.isascii()
        and value.isprintable()
        and value[:1] != " "
        and value[-1:] != " "
        and "  " not in value
    )


def identifier_problem(value: str) -> str | None:
    """Why ``value`` may not be an identifier, or None (see the module docstring)."""
    if not value:
        return "must not be empty"
    if _plain_ascii(value):
        return None
    if not value.strip():
        return "must not be blank"
    for char in value:
        category = unicodedata.category(char)
        if category in REFUSED_CATEGORIES:
            kind = _CATEGORY_NAMES[category]
            return f"holds the {kind} character {describe(char)}: not allowed in an identifier"
    ignorable = _IGNORABLE.search(value)
    if ignorable is not None:
        found = describe(ignorable.group())
        return f"holds the invisible character {found}: not allowed in an identifier"
    if unicodedata.normalize("NFKC", value) != value:
        return "is not in Unicode normal form NFKC (compose and normalise it before sending)"
    if value != value.strip() or "  " in value:
        return "must not start or end with a space, nor hold two spaces in a row"
    letters = [c for c in value if c.isalpha()]
    scripts = {unicodedata.name(c, "?").split(" ")[0] for c in letters} & _LOOKALIKE_SCRIPTS
    if len(scripts) > 1:
        mixed = " and ".join(s.title() for s in sorted(scripts))
        return f"mixes {mixed} letters, which look alike: use one script"
    if scripts and scripts != {"LATIN"} and all(c in _READS_AS_LATIN for c in letters):
        return "is made only of letters that look like Latin ones: use Latin letters"
    return None


def text_problem(value: str) -> str | None:
    """Why free text cannot be stored as sent (NUL, a lone surrogate), or None."""
    if "\x00" in value:
        return "holds NUL (U+0000), which the database cannot store"
    if not value.isascii():
        surrogate = _SURROGATE.search(value)
        if surrogate is not None:
            return f"holds a lone surrogate ({describe(surrogate.group())}), which is not UTF-8"
    return None


def has_visible(value: str) -> bool:
    """Whether ``value`` shows anything: one character that is not a space, a control,
    an invisible format character, a filler or a blank-looking space."""
    for char in value:
        if char.isspace() or char in _BLANK or _IGNORABLE.match(char):
            continue
        if unicodedata.category(char) not in REFUSED_CATEGORIES:
            return True
    return False


def name_problem(value: str) -> str | None:
    """Why ``value`` may not be a saga's name (free text that must show something)."""
    problem = text_problem(value)
    if problem is not None:
        return problem
    if (not value.isascii() or not value.strip()) and not has_visible(value):
        return "must not be blank (it holds no visible character)"
    return None


def json_problem(value: Any) -> TextRefused | None:
    """The first lone surrogate or out-of-range number in a JSON value, with its path.

    Only a body that Python's own parser read can hold one (orjson refuses both), so
    ``sagaboard.infra.http.json_body`` calls this on those bodies only.
    """
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        kind = type(item)
        if kind is str:
            if not item.isascii() and _SURROGATE.search(item):
                found = describe(_SURROGATE.search(item).group())  # type: ignore[union-attr]
                return TextRefused(f"holds a lone surrogate ({found}), which is not UTF-8", path)
        elif kind is float:
            if not math.isfinite(item):
                return TextRefused("is a number out of range (past ±1.8e308)", path)
        elif kind is dict:
            for key, child in reversed(item.items()):
                if not key.isascii() and _SURROGATE.search(key):
                    found = describe(_SURROGATE.search(key).group())  # type: ignore[union-attr]
                    return TextRefused(f"has a key with a lone surrogate ({found})", path)
                stack.append((child, join_path(path, key)))
        elif kind is list:
            for n in range(len(item) - 1, -1, -1):
                stack.append((item[n], f"{path}[{n}]"))
    return None


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def join_path(path: str, key: str) -> str:
    """``path.key``, or ``path["k e y"]`` (ASCII-escaped) for a key that is not plain."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    quoted = '"' + key.encode("ascii", "backslashreplace").decode().replace('"', '\\"') + '"'
    return f"{path}[{quoted}]"


def _marked(char: str) -> bool:
    if char == " " or char == "\n":
        return False
    if char.isspace() or char in _BLANK or _IGNORABLE.match(char):
        return True
    return unicodedata.category(char) in REFUSED_CATEGORIES


def visible(value: Any) -> SafeString:
    """``value`` escaped for HTML, every invisible, direction-changing or blank-looking
    character shown as ``⟨U+XXXX⟩`` (and the spaces a page would hide: at either end, or
    after another space)."""
    text = "" if value is None else str(value)
    if _plain_ascii(text) or not text:
        return escape(text)
    out: list[str] = []
    for n, char in enumerate(text):
        hidden = char == " " and (n == 0 or n == len(text) - 1 or text[n - 1] == " ")
        if hidden or _marked(char):
            out.append(f'<span class="invisible-char">⟨U+{ord(char):04X}⟩</span>')
        else:
            out.append(escape(char))
    return mark_safe("".join(out))


def visible_text(value: Any) -> str:
    """``visible`` as plain text (not yet escaped): for attributes (``aria-label``) and SVG
    ``<text>``, where markup cannot go; the template escapes it like any other text."""
    text = "" if value is None else str(value)
    if _plain_ascii(text) or not text:
        return text
    return "".join(
        f"⟨U+{ord(char):04X}⟩"
        if (char == " " and (n == 0 or n == len(text) - 1 or text[n - 1] == " ")) or _marked(char)
        else char
        for n, char in enumerate(text)
    )

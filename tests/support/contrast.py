"""The design tokens of static/sagaboard/sagaboard.css and their WCAG contrast ratios.

``python -m tests.support.contrast`` prints every pair the design promises (text on its
backgrounds, state colours on theirs, the focus ring and input borders on both surfaces) in
both themes, with its ratio and the WCAG AA minimum; tests/sagaboard/ui/test_design_tokens.py
asserts the same pairs, so a colour that drops below AA fails the build.

The themes live in three blocks of the stylesheet: ``:root`` (light, the default),
``:root[data-theme="dark"]`` (the header's toggle) and, inside
``@media (prefers-color-scheme: dark)``, ``:root:not([data-theme="light"])`` (the system's
choice). The last two must hold the same values.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

CSS = Path(__file__).resolve().parents[2] / "static" / "sagaboard" / "sagaboard.css"

LIGHT = ":root"
DARK = ':root[data-theme="dark"]'
SYSTEM_DARK = ':root:not([data-theme="light"])'

TEXT = 4.5  # WCAG 1.4.3, normal text
UI = 3.0  # WCAG 1.4.11, user-interface components and graphics (and 1.4.3 large text)

STATES = (
    "running", "completed", "failed", "awaiting", "compensating",
    "rolled-back", "rollback-failed", "resolved", "rejected",
)  # fmt: skip
"""Every saga/step/approval state has a colour (``--state-<name>``) that is readable as text
on the page and on its own badge tint (``--state-<name>-bg``)."""

REQUIRED = (
    "--bg", "--fg", "--muted", "--border", "--surface", "--accent", "--focus",
    "--diff-add", "--diff-remove", *(f"--state-{s}" for s in STATES),
)  # fmt: skip
"""Token names other stylesheets (timeline.css, payload.css) use: every theme defines them."""


@dataclass(frozen=True)
class Pair:
    fg: str
    bg: str
    minimum: float
    why: str


def _pairs() -> list[Pair]:
    pages = ("--bg", "--surface")
    pairs = [Pair(fg, bg, TEXT, "text") for fg in ("--fg", "--muted", "--accent") for bg in pages]
    pairs += [Pair("--fg", "--surface-2", TEXT, "text on a table header / hover")]
    pairs += [Pair("--muted", "--surface-2", TEXT, "muted text on a table header")]
    for state in STATES:
        pairs += [Pair(f"--state-{state}", bg, TEXT, "state as text") for bg in pages]
        pairs += [Pair(f"--state-{state}", f"--state-{state}-bg", TEXT, "badge text on its tint")]
    diffs = ("--diff-add", "--diff-remove")
    pairs += [Pair("--fg", bg, TEXT, "text on a diff line") for bg in diffs]
    pairs += [
        Pair("--diff-add-fg", "--diff-add", TEXT, "diff marker"),
        Pair("--diff-remove-fg", "--diff-remove", TEXT, "diff marker"),
        Pair("--warn", "--warn-bg", TEXT, "warning chip"),
        Pair("--warn", "--bg", TEXT, "warning text"),
        Pair("--danger", "--danger-bg", TEXT, "error message"),
        Pair("--danger", "--bg", TEXT, "error text"),
        Pair("--danger", "--surface", TEXT, "error text in a card"),
        Pair("--fg", "--success-bg", TEXT, "success message"),
        Pair("--fg", "--info-bg", TEXT, "info message"),
        Pair("--accent-fg", "--accent", TEXT, "primary button"),
        Pair("--bg", "--state-completed", TEXT, "approve button"),
        Pair("--accent", "--accent-bg", TEXT, "current navigation item"),
        Pair("--code-fg", "--code-bg", TEXT, "command block"),
    ]
    pairs += [Pair("--focus", bg, UI, "focus ring") for bg in (*pages, "--surface-2")]
    pairs += [Pair("--border-strong", bg, UI, "input border") for bg in pages]
    return pairs


PAIRS = _pairs()


def _block(css: str, selector: str, within: str = "") -> str:
    """The declarations of the first rule whose selector is exactly ``selector``."""
    if within:
        start = css.index(within)
        css = css[start:]
    match = re.search(r"(?:^|[}\s])" + re.escape(selector) + r"\s*\{([^}]*)\}", css)
    if match is None:
        raise LookupError(f"no {selector!r} rule in {CSS.name}")
    return match.group(1)


def tokens(selector: str, *, within: str = "", css: str | None = None) -> dict[str, str]:
    """The custom properties a rule declares, ``var()`` references resolved within it."""
    text = CSS.read_text() if css is None else css
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    found = dict(re.findall(r"(--[\w-]+)\s*:\s*([^;]+);", _block(text, selector, within)))
    found = {k: v.strip() for k, v in found.items()}
    declared = dict(found)

    def resolve(value: str, depth: int = 0) -> str:
        def one(m: re.Match[str]) -> str:
            name = m.group(1)
            return resolve(declared[name], depth + 1) if name in declared and depth < 5 else name

        return re.sub(r"var\((--[\w-]+)\)", one, value)

    return {k: resolve(v) for k, v in declared.items()}


def themes(css: str | None = None) -> dict[str, dict[str, str]]:
    """The tokens of each theme: light, dark (toggle) and dark (system preference)."""
    return {
        "light": tokens(LIGHT, css=css),
        "dark": tokens(DARK, css=css),
        "system-dark": tokens(SYSTEM_DARK, within="prefers-color-scheme: dark", css=css),
    }


def rgb(colour: str) -> tuple[float, float, float]:
    """A #rgb or #rrggbb colour as 0..1 channels (tokens in a contrast pair are plain hex)."""
    value = colour.strip().lstrip("#")
    if not re.fullmatch(r"[0-9a-fA-F]{3}|[0-9a-fA-F]{6}", value):
        raise ValueError(f"{colour!r} is not a #rgb or #rrggbb colour")
    if len(value) == 3:
        value = "".join(c * 2 for c in value)
    r, g, b = (int(value[i : i + 2], 16) / 255 for i in (0, 2, 4))
    return r, g, b


def luminance(colour: str) -> float:
    """WCAG 2 relative luminance."""

    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb(colour))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def ratio(fg: str, bg: str) -> float:
    """WCAG 2 contrast ratio of two colours, 1..21."""
    a, b = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def report(css: str | None = None) -> list[tuple[str, Pair, float]]:
    """Every pair in every theme with its ratio."""
    rows = []
    for theme, values in themes(css).items():
        for pair in PAIRS:
            rows.append((theme, pair, ratio(values[pair.fg], values[pair.bg])))
    return rows


def main() -> int:
    failing = 0
    for theme, pair, value in report():
        ok = value >= pair.minimum
        failing += not ok
        print(
            f"{'ok ' if ok else 'LOW'} {theme:<11} {pair.fg:<24} on {pair.bg:<24}"
            f" {value:5.2f} (>= {pair.minimum:g}, {pair.why})"
        )
    print(f"{len(PAIRS)} pairs per theme; {failing} below WCAG AA")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())

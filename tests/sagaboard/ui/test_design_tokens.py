"""The design tokens of static/sagaboard/sagaboard.css hold WCAG AA in both themes.

The stylesheet's custom properties are parsed (tests/support/contrast.py) for the light
theme, the dark theme the header's toggle chooses and the dark theme the system chooses; every
pair the design promises is checked: text and state colours on the page, the surfaces and
their badge tints at 4.5:1, the focus ring and input borders at 3:1. A colour change that
drops one below AA fails here, with the pair and its ratio.
"""

from __future__ import annotations

import re

import pytest

from tests.support import contrast

THEMES = contrast.themes()


@pytest.mark.parametrize("theme", sorted(THEMES))
def test_every_promised_pair_meets_wcag_aa(theme: str) -> None:
    values = THEMES[theme]
    ratios = [(p, contrast.ratio(values[p.fg], values[p.bg])) for p in contrast.PAIRS]
    low = [
        f"{p.fg} on {p.bg}: {r:.2f} < {p.minimum:g} ({p.why})" for p, r in ratios if r < p.minimum
    ]
    assert not low, f"{theme} theme below WCAG AA:\n" + "\n".join(low)


@pytest.mark.parametrize("theme", sorted(THEMES))
def test_every_theme_defines_the_shared_tokens(theme: str) -> None:
    """Other stylesheets (timeline.css, payload.css) rely on these names in both themes."""
    missing = [name for name in contrast.REQUIRED if name not in THEMES[theme]]
    assert not missing, f"{theme} theme lacks {missing}"


def test_the_two_dark_blocks_agree() -> None:
    """The toggle's dark and the system's dark are one theme written twice (CSS cannot share a
    block between a selector and a media query): they must not drift apart."""
    assert THEMES["dark"] == THEMES["system-dark"]


def test_the_dark_theme_overrides_every_light_colour() -> None:
    """A colour defined only in the light block would leak light into dark mode."""
    colours = {k for k, v in THEMES["light"].items() if re.fullmatch(r"#[0-9a-fA-F]{3,6}", v)}
    assert colours - set(THEMES["dark"]) == set()


def test_every_state_has_a_badge_style_and_an_icon() -> None:
    """Each state a badge can show (saga, step, approval) has its colour rule and an icon of
    its own, so no two states differ by colour alone."""
    css = contrast.CSS.read_text()
    states = [
        "in_progress", "pending", "completed", "approved", "failed", "in_doubt",
        "awaiting_approval", "compensating", "rolled_back", "rolled_back_with_exceptions",
        "rollback_failed", "resolved", "void", "rejected", "expired",
    ]  # fmt: skip
    for state in states:
        assert re.search(rf"\.status-{state}\b[^{{]*\{{[^}}]*color: var\(--state-", css), state
    icons = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*content:[^}]*)\}", css):
        content = re.search(r'content: "([^"]+)"', body)
        for selector in selectors.split(","):
            state = re.fullmatch(r"\s*\.status-(\w+) \.dot::before\s*", selector)
            if state and content:
                icons[state.group(1)] = content.group(1)
    tell_apart = {"completed", "failed", "awaiting_approval", "compensating", "rolled_back",
                  "rollback_failed", "resolved", "rejected", "expired", "in_doubt"}  # fmt: skip
    assert tell_apart <= set(icons), tell_apart - set(icons)
    chosen = [icons[s] for s in tell_apart]
    assert len(set(chosen)) == len(chosen), f"two states share an icon: {icons}"


def test_the_contrast_check_can_fail() -> None:
    """The ratio maths against WCAG's own reference values, and a bad colour is caught."""
    assert contrast.ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast.ratio("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)
    bad = contrast.CSS.read_text().replace("--muted: #59636e;", "--muted: #9aa3ad;", 1)
    light = contrast.themes(bad)["light"]
    assert contrast.ratio(light["--muted"], light["--bg"]) < contrast.TEXT
    with pytest.raises(ValueError, match="not a #rgb"):
        contrast.rgb("rgb(0, 0, 0)")

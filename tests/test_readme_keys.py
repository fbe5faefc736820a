"""The keyboard table (the README's, now the operator guide's page docs/operator/keyboard.md)
lists every shortcut the app has, and none it lacks (issue 31, item 7: the table had lost ``g``
then ``i``, the Inbox).

Where the app says what its keys are: the help dialog's entries (templates/sagaboard/_keys.html
and the "On every page" list of templates/_base.html), the controls a key triggers
(``aria-keyshortcuts`` in any template) and the keys static/sagaboard/keys.js handles itself.
A key is written as the table writes it: ``g o`` for "g then o", ``Esc`` for Escape.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE_PAGE = ROOT / "docs" / "operator" / "keyboard.md"  # the README's table moved here
KEYS_HTML = ROOT / "templates" / "sagaboard" / "_keys.html"
BASE_HTML = ROOT / "templates" / "_base.html"
KEYS_JS = ROOT / "static" / "sagaboard" / "keys.js"

NAMES = {"Escape": "Esc"}


def _keys_of_entry(tokens: list[str], then: bool) -> set[str]:
    """``[g, o]`` with "then": ``{"g o"}``; ``[j, k]`` without: ``{"j", "k"}``. A "then"
    entry may list several second keys (``g`` then ``o`` / ``s``)."""
    tokens = [NAMES.get(t, t) for t in tokens]
    if then:
        return {f"{tokens[0]} {second}" for second in tokens[1:]}
    return set(tokens)


def readme_table() -> set[str]:
    """The keys of the table under "# Keyboard shortcuts" (its second column)."""
    text = TABLE_PAGE.read_text()
    section = text.split("# Keyboard shortcuts\n", 1)[1].split("\n#", 1)[0]
    keys: set[str] = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if "|" in line else []
        if len(cells) < 3 or cells[1] in ("Key", "---"):
            continue
        keys |= _keys_of_entry(re.findall(r"`([^`]+)`", cells[1]), " then " in cells[1])
    assert keys, f"no keyboard table under '# Keyboard shortcuts' in {TABLE_PAGE.name}"
    return keys


def dialog_keys(path: Path) -> set[str]:
    """The keys of the help dialog's entries (each a <dt> of <kbd>s) in ``path``."""
    keys: set[str] = set()
    for entry in re.findall(r"<dt>(.*?)</dt>", path.read_text(), flags=re.S):
        keys |= _keys_of_entry(re.findall(r"<kbd>(.*?)</kbd>", entry), " then " in entry)
    return keys


def declared_keys() -> set[str]:
    """The keys templates give their controls (``aria-keyshortcuts="x"``)."""
    keys: set[str] = set()
    for path in (ROOT / "templates").rglob("*.html"):
        for value in re.findall(r'aria-keyshortcuts="([^"]*)"', path.read_text()):
            keys |= {NAMES.get(k, k) for k in value.split()}
    return keys


def script_keys() -> set[str]:
    """The keys keys.js compares ``e.key`` with (``key === "j"``): its own shortcuts."""
    found = re.findall(r'key === "([^"]+)"', KEYS_JS.read_text())
    return {NAMES.get(k, k) for k in found}


def test_the_table_is_read() -> None:
    assert {"/", "?", "j", "k", "g o"} <= readme_table()


def test_every_key_of_the_help_dialog_is_in_the_readme_table() -> None:
    listed = dialog_keys(KEYS_HTML) | dialog_keys(BASE_HTML)
    assert "g i" in listed and "Esc" in listed  # the parse sees the dialog
    missing = sorted(listed - readme_table())
    assert missing == [], f"the help dialog has keys the keyboard table lacks: {missing}"


def test_every_key_a_control_declares_is_in_the_readme_table() -> None:
    missing = sorted(declared_keys() - readme_table())
    assert missing == [], f"templates give controls keys the keyboard table lacks: {missing}"


def test_every_key_keys_js_handles_is_in_the_readme_table() -> None:
    table = readme_table()
    prefixes = {key.split()[0] for key in table if " " in key}  # "g": the first of "g o"
    missing = sorted(script_keys() - table - prefixes)
    assert missing == [], f"keys.js handles keys the keyboard table lacks: {missing}"


def test_the_readme_table_lists_no_key_the_app_lacks() -> None:
    known = dialog_keys(KEYS_HTML) | dialog_keys(BASE_HTML) | declared_keys() | script_keys()
    extra = sorted(readme_table() - known)
    assert extra == [], f"the keyboard table lists keys the app does not have: {extra}"

"""The README and the manual point at files that exist: every image, every relative link.

A screenshot renamed or a page moved left a broken image on the front page (issue 31:
docs/screenshots/overview.png and saga-list.png were gone); this keeps each one honest.
The manual's own links and anchors are checked by ``mkdocs build --strict`` (``make lint``);
the README is not part of the site, so its links into the manual, anchors included, are
checked here. The README stays a front page (issue 33): at most 300 lines.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FRONT_PAGE_LINES = 300


def relative_targets(page: Path) -> list[str]:
    """The link targets of ``page`` that name a file of this repository (no URL, no anchor)."""
    return [t.split("#", 1)[0] for t in relative_links(page) if t.split("#", 1)[0]]


def relative_links(page: Path) -> list[str]:
    """The link targets of ``page`` that are not URLs or absolute paths, anchors kept."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not a link
    return [
        target
        for target in LINK.findall(text)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith("/")
    ]


def slugs(markdown: str) -> set[str]:
    """The anchors of the headings of ``markdown``, as GitHub and MkDocs' toc both make them
    (lowercase, punctuation dropped, spaces to hyphens)."""
    markdown = re.sub(r"```.*?```", "", markdown, flags=re.S)
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", markdown, re.M):
        text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
        found.add(text.replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_image_and_relative_link_points_at_a_file(page: Path) -> None:
    missing = [t for t in relative_targets(page) if not (page.parent / t).exists()]
    assert missing == [], f"{page.name} links to files that do not exist: {missing}"


def test_the_readme_links_to_sections_of_the_manual_that_exist() -> None:
    broken = []
    for target in relative_links(ROOT / "README.md"):
        path, _, anchor = target.partition("#")
        page = ROOT / path if path else ROOT / "README.md"
        if anchor and page.suffix == ".md" and anchor not in slugs(page.read_text()):
            broken.append(target)
    assert broken == [], f"README.md links to sections that do not exist: {broken}"


def test_the_front_page_shows_a_screenshot_that_exists() -> None:
    images = [t for t in relative_targets(ROOT / "README.md") if t.endswith(".png")]
    assert len(images) >= 1 and all((ROOT / t).is_file() for t in images)


def test_the_manual_shows_the_screenshots_that_exist() -> None:
    """The front page's screenshots moved to the manual (the home page, the operator guide)."""
    images = {
        (page.parent / t).resolve()
        for page in PAGES
        for t in relative_targets(page)
        if t.endswith(".png")
    }
    assert len(images) >= 10 and all(image.is_file() for image in images)
    shots = {p.resolve() for p in (DOCS / "screenshots").glob("*.png")}
    assert shots - images == set(), f"screenshots no page shows: {sorted(shots - images)}"


def test_the_readme_is_a_front_page() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= FRONT_PAGE_LINES, (
        f"README.md has {lines} lines: at most {FRONT_PAGE_LINES} (issue 33); "
        "move the rest into the manual (docs/, mkdocs.yml's nav)"
    )

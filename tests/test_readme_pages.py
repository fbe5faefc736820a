"""Every page the README and the manual name answers a GET: no 404, no 405, no 500 (issue 31,
item 7).

The README once sent readers to ``/views/`` as the saved views' page; a GET there answers an
empty 405 (it only saves, by POST). This reads the README and the manual (docs/: the README's
operator sections moved there, issue 33) and opens each page they name, as the demo's
superuser on the demo data. docs/deployment.md is left out: its paths in backticks are the
host's (``/etc/nginx/sites-enabled/``, nginx's ``/static/``), not the dashboard's.

The rule for "a page the README names": a path in backticks, in the prose (not in a fenced
code block), that starts with ``/`` and whose path (before ``?`` or ``#``) ends with ``/``,
as every page of the dashboard does; or that ends with a download's extension (``.csv``,
``.jsonl``, ``.json``, ``.html``). Paths under ``/api/`` (the API, docs/api.md) and ``/ws/``
(the websocket) are not pages. A placeholder (``<project>``, ``<saga id>``, ...) is filled in
with a demo object; one the test does not know fails it, so a new kind of page gets a sample.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [
    README,
    *(p for p in sorted((ROOT / "docs").rglob("*.md")) if p.name != "deployment.md"),
]

CODE_BLOCK = re.compile(r"```.*?```", re.S)
IN_BACKTICKS = re.compile(r"`(/(?:[^`\s<]|<[^<>`]*>)*)`")  # a placeholder may hold a space
DOWNLOAD = re.compile(r"\.(csv|jsonl|json|html)$")
NOT_PAGES = ("/api/", "/ws/")
PLACEHOLDER = re.compile(r"<[^<>]+>")


def pages_named(text: str) -> list[str]:
    """The pages ``text`` (Markdown) names, by the rule above, in order, each once."""
    found: dict[str, None] = {}
    for path in IN_BACKTICKS.findall(CODE_BLOCK.sub("", text)):
        bare = re.split(r"[?#]", path, maxsplit=1)[0]
        if bare.startswith(NOT_PAGES) or not (bare.endswith("/") or DOWNLOAD.search(bare)):
            continue
        found[path] = None
    return list(found)


def readme_pages() -> list[str]:
    """The pages the README and the manual name, each once."""
    return list(dict.fromkeys(page for doc in DOCS for page in pages_named(doc.read_text())))


def test_the_rule_finds_the_pages_of_the_navigation() -> None:
    """The rule matches what the README and the manual show as pages (it must not quietly
    match nothing)."""
    named = set(readme_pages())
    for page in ("/", "/overview/", "/approvals/", "/attention/", "/inbox/", "/tools/",
                 "/batch/", "/audit/", "/tokens/", "/policies/"):  # fmt: skip
        assert page in named, f"the README and the manual no longer name {page} in backticks"
    assert "/bin/sh" not in " ".join(named) and not any(p.startswith("/api/") for p in named)


def test_the_rule_catches_a_page_that_answers_405() -> None:
    text = "Sign out (`/logout/`, POST only) or see `/views/` and `/api/v1/events`; `/bin/sh -c`."
    assert pages_named(text) == ["/logout/", "/views/"]


@pytest.fixture
def demo(settings: Any, client: Any) -> dict[str, Callable[[str], str]]:
    """The demo loaded, its superuser logged in; the value of each placeholder."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from sagaboard.models import Approval, AuditEntry, DecisionLink
    from sagaboard.notify.services import link_tokens
    from tests.support.batch_world import demo_batch

    settings.DEBUG = True
    call_command("sagaboard_demo", stdout=StringIO())
    user = get_user_model().objects.get(username="demo")
    approval = Approval.objects.filter(status="PENDING").order_by("pk").first()
    assert approval is not None
    link = DecisionLink.objects.create(
        approval=approval, user=user, expires_at=timezone.now() + timedelta(days=1)
    )
    token = link_tokens.link_mint(link)
    batch = demo_batch()
    entry = AuditEntry.objects.order_by("pk").first()
    assert entry is not None
    client.force_login(user)
    return {
        "<project>": lambda path: "demo",
        "<saga id>": lambda path: "demo-refund-stuck",
        "<step id>": lambda path: "step-2",
        "<tool>": lambda path: "refund_payment",
        "<id>": lambda path: str(batch),
        "<token>": lambda path: token,
        "<number>": lambda path: str(approval.pk if path.startswith("/approvals/") else entry.pk),
    }


def sample(path: str, values: dict[str, Callable[[str], str]]) -> str:
    """``path`` with its placeholders filled in and its fragment dropped (never sent)."""

    def fill(match: re.Match[str]) -> str:
        if match.group(0) not in values:
            pytest.fail(f"the docs name {path}: give the test a sample for {match.group(0)}")
        return values[match.group(0)](path)

    return PLACEHOLDER.sub(fill, path).split("#", 1)[0]


@pytest.mark.django_db
def test_every_page_the_readme_names_answers_a_get(
    demo: dict[str, Callable[[str], str]], client: Any
) -> None:
    answers = {}
    for page in readme_pages():
        url = sample(page, demo)
        response = client.get(url, follow=True)
        answers[page] = (url, response.status_code)
    wrong = {page: answer for page, answer in answers.items() if answer[1] != 200}
    assert wrong == {}, (
        "the README and the manual name these as pages, and a GET as the demo superuser answers "
        f"(url, status): {wrong}"
    )

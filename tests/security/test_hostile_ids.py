"""Saga ids are the agent's choice, within the text policy (``sagaboard.infra.text_policy``):
whatever a stored one holds, every page that lists or links the saga renders, its link
leads to that saga (not elsewhere, not off the site), and two different ids or names never
look the same on a page. Ids that would (look-alikes, invisible characters, NUL) are
refused by the API, naming the field."""

from __future__ import annotations

import json
import re
from html import unescape
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.urls import reverse

from sagaboard.access.services.tokens import token_create
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.infra.text_policy import visible
from sagaboard.live import consumers, fragments
from sagaboard.models import Project
from sagaboard.models import Saga as SagaRow
from tests.support.agent_runs import storebot_events
from tests.support.fuzz_data import DatabaseState, table_digests
from undo_core import Saga, define_tool

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]

IDS = [
    "orders/2026/42",  # a path-like id
    "..",
    "./x",
    "javascript:alert(1)",
    "//evil.example",
    "x?y=1#z",
    " spaced id ",
    "%2F%00",
    '<script>alert(1)</script>"',
    "ü-ñ-雪",
]


@pytest.fixture
def root() -> Any:
    shop = Project.objects.create(slug="shop", name="Shop")
    user = get_user_model().objects.create_superuser("root", password="pw-root-123456")
    shop.members.add(user)
    return user


def test_any_saga_id_renders_everywhere_and_links_to_its_saga(root: Any) -> None:
    shop = Project.objects.get(slug="shop")
    secret = token_create(project=shop, label="agent", acting_user=root).secret
    api = Client(headers={"Authorization": f"Bearer {secret}"})
    half = len(IDS) // 2
    for n, sid in enumerate(IDS[:half]):  # through the API
        body = {"event_id": f"e{n}", "name": f"n{n}", "id": sid}
        answer = api.post("/api/v1/sagas", body, content_type="application/json")
        assert answer.status_code == 201, (sid, answer.content)
    store = DjangoStore(shop)  # an agent in the same process: no API in between
    tool = define_tool("charge", lambda i: 1, lambda o, i: None)
    for sid in IDS[half:]:
        Saga("in-process", saga_id=sid, store=store).execute(tool, {})

    client = Client()
    client.force_login(root)
    for page in ("/", "/overview/", "/attention/", "/approvals/", "/admin/sagaboard/saga/"):
        assert client.get(page).status_code == 200, page
    listing = client.get("/").content.decode()
    links = [unescape(h) for h in re.findall(r'href="(/sagas/shop/[^"]*)"', listing)]
    assert len(links) == len(IDS)
    shown = set()
    for link in links:
        assert not link.startswith("//")
        page = client.get(link)
        assert page.status_code == 200, link
        found = re.search(r"<code>(.*?)</code> · project", page.content.decode(), re.S)
        assert found is not None, link
        shown.add(as_text(found.group(1)))
    assert shown == set(IDS)  # each link leads to its own saga


MARKER = re.compile(r'<span class="invisible-char">⟨U\+([0-9A-F]{4,6})⟩</span>')


def as_text(html: str) -> str:
    """The characters a fragment shows, each marker read back as the character it stands for."""
    return unescape(MARKER.sub(lambda m: chr(int(m.group(1), 16)), html))


# ---------------------------------------------------------------- the text policy, refused

LOOK_ALIKES = [
    ("cafe\u0301", "NFKC"),  # NFD: e + combining acute, drawn as "café"
    ("\ufb01le-1", "NFKC"),  # the ligature fi
    ("\uff4f\uff52\uff44\uff45\uff52", "NFKC"),  # fullwidth "order"
    ("pay\u200dment", "U+200D ZERO WIDTH JOINER"),
    ("pay\u200bment", "U+200B ZERO WIDTH SPACE"),
    ("\u202eredro", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    ("p\u0430ypal", "mixes Cyrillic and Latin"),  # a Cyrillic a among Latin letters
    ("\u0430\u0440\u0435", "look like Latin"),  # Cyrillic "ape", every letter a look-alike
    ("a\x00b", "U+0000"),  # NUL was rewritten to U+FFFD: "a\x00b" and "a\ufffdb" collided
    ("\u200b\u200b", "U+200B"),  # only invisible characters
    ("\u3164", "U+3164 HANGUL FILLER"),  # a letter that draws nothing
    (" order-1", "space"),
    ("order\u2028x", "line separator"),
    ("\ue000", "private-use"),
]


@pytest.fixture
def api() -> Any:
    shop, _ = Project.objects.get_or_create(slug="shop", defaults={"name": "Shop"})
    secret = token_create(project=shop, label="agent").secret
    client = Client(headers={"Authorization": f"Bearer {secret}"})

    def post(path: str, body: Any) -> Any:
        return client.post(f"/api/v1{path}", json.dumps(body), content_type="application/json")

    return post


def digests() -> dict[str, str]:
    with connection.cursor() as cursor:
        return table_digests(cursor)


def refused(response: Any, field: str, reason: str) -> None:
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error" and error["field"] == field, error
    assert reason in error["message"], error


@pytest.mark.parametrize(("value", "reason"), LOOK_ALIKES)
def test_a_look_alike_or_invisible_id_is_refused_naming_the_field(
    api: Any, value: str, reason: str
) -> None:
    before = digests()
    refused(api("/sagas", {"event_id": "b", "name": "n", "id": value}), "id", reason)
    refused(api("/sagas", {"event_id": value, "name": "n"}), "event_id", reason)
    event = storebot_events()[0]
    event["saga"]["id"] = value
    refused(api("/events", {"events": [event]}), "events[0].saga.id", reason)
    saga = api("/sagas", {"event_id": "ok", "name": "n", "id": "order-1"}).json()["id"]
    before = digests()
    refused(api(f"/sagas/{saga}/steps", {"event_id": "s", "tool_name": value}), "tool_name", reason)
    steps = storebot_events("agent-1")[:2]
    steps[1]["step"]["id"] = steps[1]["event"]["step_id"] = value
    refused(api("/events", {"events": steps}), "events[1].step.id", reason)
    assert DatabaseState.changed(before, digests()) == []


@pytest.mark.parametrize("name", ["\u200b", "\u200b\u2060\ufeff", "\u3164", "\u2800", "\u00a0 "])
def test_a_name_of_only_invisible_characters_is_refused(api: Any, name: str) -> None:
    before = digests()
    refused(api("/sagas", {"event_id": "b", "name": name}), "name", "blank")
    event = storebot_events()[0]
    event["saga"]["name"] = name
    refused(api("/events", {"events": [event]}), "events[0].saga.name", "blank")
    assert DatabaseState.changed(before, digests()) == []


def test_ids_in_any_script_and_names_with_any_characters_are_kept_as_sent(api: Any) -> None:
    for n, sid in enumerate(["заказ-42", "παραγγελία-7", "注文-1", "ü-ñ", "order 42", "a\ufffdb"]):
        answer = api("/sagas", {"event_id": f"e{n}", "name": "n", "id": sid})
        assert answer.status_code == 201 and answer.json()["id"] == sid, answer.content
    name = "Refund \u202e(reversed) \u200b"  # free text: kept exactly, shown visibly
    answer = api("/sagas", {"event_id": "named", "name": name})
    assert answer.status_code == 201 and answer.json()["name"] == name


# ---------------------------------------------------------------- shown visibly


def test_stored_names_and_ids_that_differ_only_invisibly_never_look_the_same(root: Any) -> None:
    # Rows from before the policy (or written in-process): the pages show what differs.
    store = DjangoStore(Project.objects.get(slug="shop"))
    tool = define_tool("charge", lambda i: 1, lambda o, i: None)
    twins = {"pay": "Refund", "pa\u200by": "Refund\u202e", "pay\u2060": "Refund\u200b"}
    for sid, name in twins.items():
        Saga(name, saga_id=sid, store=store).execute(tool, {})
    client = Client()
    client.force_login(root)
    listing = client.get("/").content.decode()
    rows = re.findall(r'<tr id="saga-\d+">.*?</tr>', listing, re.S)
    assert len(rows) == 3
    # What a person reads (tags dropped, markers kept as text) differs from row to row...
    assert len({re.sub(r"<[^>]+>", "", row) for row in rows}) == 3
    for row in rows:
        assert not {"\u200b", "\u202e", "\u2060"} & set(row)  # ...no raw invisible left
        name = as_text(re.search(r'<a href="[^"]*"[^>]*>(.*?)</a>', row, re.S).group(1))  # type: ignore[union-attr]
        sid = as_text(re.search(r'<code class="muted">(.*?)</code>', row, re.S).group(1))  # type: ignore[union-attr]
        assert twins[sid] == name  # ...and reads back as exactly what is stored
    saga = SagaRow.objects.get(saga_id="pa\u200by")
    page = client.get(reverse("saga_detail", args=["shop", saga.saga_id])).content.decode()
    assert '<code>pa<span class="invisible-char">⟨U+200B⟩</span>y</code>' in page
    assert 'Refund<span class="invisible-char">⟨U+202E⟩</span>' in page
    # The live fragments (pushed over the websocket) render the same way.
    row = fragments.saga_row(saga, 1)
    assert "⟨U+200B⟩" in row and "⟨U+202E⟩" in row and "\u200b" not in row
    detail = consumers._render_detail.func(saga.pk, 1)
    assert "⟨U+200B⟩" in detail and "\u202e" not in detail


def test_the_visible_filter_escapes_text_and_marks_what_a_page_would_hide() -> None:
    assert visible("<b>order-1</b>") == "&lt;b&gt;order-1&lt;/b&gt;"
    shown = visible('<i>\u202e"x"  \u00a0')
    assert as_text(shown) == '<i>\u202e"x"  \u00a0' and "<i>" not in shown
    assert shown.count("invisible-char") == 3  # U+202E, the second space, the NBSP
    assert as_text(visible(" a ")) == " a " and visible(" a ").count("U+0020") == 2


def test_nul_in_a_page_address_or_filter_is_a_4xx_not_a_database_error(root: Any) -> None:
    # PostgreSQL cannot compare text with NUL: the saga page and the list's filters failed.
    client = Client()
    client.force_login(root)
    assert client.get("/sagas/shop/a%00b/").status_code == 404
    for name in ("q", "tool", "cursor"):
        assert client.get("/", {name: "a\x00"}).status_code == 400, name
    assert client.get("/", {"q": "a\ufffdb"}).status_code == 200

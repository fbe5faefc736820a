"""Saga ids are the agent's choice: whatever one holds, every page that lists or links the
saga renders, and its link leads to that saga (not elsewhere, not off the site)."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from sagaboard.models import Project
from sagaboard.storage import DjangoStore
from sagaboard.tokens import token_create
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
        shown.add(unescape(found.group(1)))
    assert shown == set(IDS)  # each link leads to its own saga

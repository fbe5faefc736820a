"""Saved views: per user, audited, CSRF-protected; a shared one is offered only in its
project, and its link never shows anyone sagas of a project they cannot see."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from sagaboard.models import AuditEntry, Project, SavedView
from tests.support.search_world import build

pytestmark = pytest.mark.django_db


def member(username: str, *projects: Project, csrf: bool = False) -> tuple[Client, Any]:
    user = get_user_model().objects.create_user(username, password=f"pw-{username}-123")
    for project in projects:
        project.members.add(user)
    user.groups.add(Group.objects.get(name="viewer"))
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client, user


@pytest.fixture
def world() -> dict[str, Any]:
    shop = Project.objects.create(slug="shop", name="Shop")
    lab = Project.objects.create(slug="lab", name="Lab")
    build(shop)
    build(lab)
    return {"shop": shop, "lab": lab}


def ids(page: str) -> list[str]:
    return re.findall(r'<code class="muted">([^<]+)</code></td>', page)


def test_saving_a_view_keeps_its_filter_and_lists_it(world: dict[str, Any]) -> None:
    client, user = member("alice", world["shop"])
    response = client.post(
        "/views/", {"name": " failed  refunds ", "query": "tool=charge_card&project=shop&cursor=x"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/?project=shop&tool=charge_card"  # canonical, no cursor
    view = SavedView.objects.get(user=user)
    assert (view.name, view.project, view.shared) == ("failed refunds", world["shop"], False)
    page = client.get("/").content.decode()
    assert '<a href="/?project=shop&amp;tool=charge_card">failed refunds</a>' in page
    assert ids(client.get(response["Location"]).content.decode()) == ["s-failed"]
    entry = AuditEntry.objects.get(action="view.save")
    assert (entry.actor, entry.target, entry.project) == (
        "user:alice",
        "view:failed refunds",
        world["shop"],
    )
    # The same name replaces the view.
    client.post("/views/", {"name": "failed refunds", "query": "error=timeout"})
    assert SavedView.objects.get(user=user).query == "error=timeout"


def test_views_are_per_user(world: dict[str, Any]) -> None:
    alice, _ = member("alice", world["shop"])
    bob, _ = member("bob", world["shop"])
    alice.post("/views/", {"name": "alice-charges", "query": "project=shop&tool=charge_card"})
    assert "alice-charges" in alice.get("/").content.decode()
    assert "alice-charges" not in bob.get("/").content.decode()
    view = SavedView.objects.get(name="alice-charges")
    assert bob.post(f"/views/{view.pk}/delete/").status_code == 404
    assert SavedView.objects.filter(pk=view.pk).exists()
    assert alice.post(f"/views/{view.pk}/delete/").status_code == 302
    assert not SavedView.objects.filter(pk=view.pk).exists()
    assert AuditEntry.objects.filter(action="view.delete", actor="user:alice").count() == 1


def test_a_shared_view_is_offered_in_its_project_only(world: dict[str, Any]) -> None:
    alice, _ = member("alice", world["shop"], world["lab"])
    bob, _ = member("bob", world["shop"])
    carol, _ = member("carol", world["lab"])
    alice.post(
        "/views/", {"name": "shop fails", "query": "project=shop&status=ROLLED_BACK", "shared": "1"}
    )
    assert "shop fails" in bob.get("/").content.decode()
    assert "shared by alice" in bob.get("/").content.decode()
    assert "shop fails" not in carol.get("/").content.decode()


def test_a_shared_link_never_shows_another_project_s_sagas(world: dict[str, Any]) -> None:
    alice, _ = member("alice", world["shop"], world["lab"])
    carol, _ = member("carol", world["lab"])
    link = "/?project=shop&status=ROLLED_BACK"
    assert ids(alice.get(link).content.decode()) == ["s-failed"]
    assert ids(carol.get(link).content.decode()) == []  # carol is not in shop
    # A view of all my projects shows each viewer only theirs.
    alice_all = alice.get("/?status=ROLLED_BACK").content.decode()
    carol_all = carol.get("/?status=ROLLED_BACK").content.decode()
    assert len(ids(alice_all)) == 2 and len(ids(carol_all)) == 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "", "query": ""}, "a name of 1 to 100 characters"),
        ({"name": "x" * 101, "query": ""}, "a name of 1 to 100 characters"),
        ({"name": "bad", "query": "status=NOPE"}, "status: unknown value"),
        ({"name": "theirs", "query": "project=lab"}, "project: not one of your projects"),
        ({"name": "all", "query": "tool=x", "shared": "1"}, "share a view of one project"),
    ],
)
def test_a_bad_view_is_not_saved_and_says_why(
    world: dict[str, Any], data: dict[str, str], message: str
) -> None:
    alice, _ = member("alice", world["shop"])
    response = alice.post("/views/", data, follow=True)
    assert message in response.content.decode()
    assert (
        not SavedView.objects.exists()
        and not AuditEntry.objects.filter(action="view.save").exists()
    )


def test_saving_and_deleting_need_post_and_a_csrf_token(world: dict[str, Any]) -> None:
    alice, user = member("alice", world["shop"], csrf=True)
    assert alice.get("/views/").status_code == 405
    assert alice.post("/views/", {"name": "n", "query": ""}).status_code == 403
    view = SavedView.objects.create(user=user, name="kept", query="")
    assert alice.post(f"/views/{view.pk}/delete/").status_code == 403
    assert SavedView.objects.filter(pk=view.pk).exists()
    assert Client().post("/views/", {"name": "n"}).status_code == 302  # to the login page

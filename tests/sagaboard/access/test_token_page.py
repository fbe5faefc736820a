"""The token page: an admin mints a token (secret shown once), lists and revokes; others can't."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from sagaboard.models import ApiToken, AuditEntry, Project

pytestmark = pytest.mark.django_db


def user_with(role: str, *projects: Project) -> Any:
    user = get_user_model().objects.create_user(f"{role}-user", password="pw-123456789")
    user.groups.add(Group.objects.get(name=role))
    for project in projects:
        project.members.add(user)
    return user


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def admin(client: Client, shop: Project) -> Client:
    client.force_login(user_with("admin", shop))
    return client


def api_status(client: Client, secret: str) -> int:
    return client.get("/api/v1/sagas", headers={"authorization": f"Bearer {secret}"}).status_code


def test_a_new_token_is_shown_once_and_works(admin: Client, shop: Project) -> None:
    response = admin.post("/tokens/", {"project": "shop", "label": "storebot prod"})
    assert response.status_code == 201 and response["Cache-Control"] == "no-store"
    secret = re.search(r'<code id="secret">(sgb_[^<]+)</code>', response.content.decode())
    assert secret is not None
    token = ApiToken.objects.get()
    assert token.label == "storebot prod" and secret.group(1) not in token.secret_hash
    assert api_status(Client(), secret.group(1)) == 200
    listing = admin.get("/tokens/").content.decode()
    assert f"sgb_{token.prefix}_" in listing and secret.group(1) not in listing
    entry = AuditEntry.objects.get(action="token.create")
    assert entry.user is not None and entry.user.get_username() == "admin-user"


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"project": "shop", "label": ""}, "A label is required"),
        ({"project": "shop", "label": "x" * 101}, "At most 100 characters"),
        ({"project": "elsewhere", "label": "ok"}, "Choose one of your projects"),
    ],
)
def test_bad_input_is_named_and_mints_nothing(
    admin: Client, form: dict[str, str], message: str
) -> None:
    Project.objects.create(slug="elsewhere", name="Not mine")
    response = admin.post("/tokens/", form)
    assert response.status_code == 400 and message in response.content.decode()
    assert not ApiToken.objects.exists() and not AuditEntry.objects.exists()


def test_revoking_needs_a_reason_then_locks_the_agent_out(admin: Client, shop: Project) -> None:
    response = admin.post("/tokens/", {"project": "shop", "label": "agent"})
    secret = re.search(r'<code id="secret">(sgb_[^<]+)</code>', response.content.decode())
    assert secret is not None
    token = ApiToken.objects.get()
    page = admin.post(f"/tokens/{token.prefix}/revoke/", {"reason": " "}, follow=True)
    assert "a reason is required" in page.content.decode()
    assert api_status(Client(), secret.group(1)) == 200
    page = admin.post(f"/tokens/{token.prefix}/revoke/", {"reason": "leaked"}, follow=True)
    assert "is revoked" in page.content.decode()
    assert api_status(Client(), secret.group(1)) == 401
    assert AuditEntry.objects.get(action="token.revoke").reason == "leaked"


def test_tokens_of_other_projects_are_invisible_and_untouchable(
    admin: Client, shop: Project
) -> None:
    other = Project.objects.create(slug="other", name="Other")
    theirs = ApiToken.objects.create(
        project=other, label="theirs", prefix="abcd1234", secret_hash="0"
    )
    assert "abcd1234" not in admin.get("/tokens/").content.decode()
    page = admin.post("/tokens/abcd1234/revoke/", {"reason": "mine now"}, follow=True)
    assert "No such token" in page.content.decode()
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


@pytest.mark.parametrize("role", ["viewer", "operator", "approver"])
def test_only_admins_reach_tokens(client: Client, shop: Project, role: str) -> None:
    client.force_login(user_with(role, shop))
    ApiToken.objects.create(project=shop, label="x", prefix="feed0001", secret_hash="0")
    assert client.get("/tokens/").status_code == 403
    assert client.post("/tokens/", {"project": "shop", "label": "x"}).status_code == 403
    assert client.post("/tokens/feed0001/revoke/", {"reason": "r"}).status_code == 403
    assert ApiToken.objects.count() == 1 and ApiToken.objects.get().revoked_at is None
    assert "/tokens/" not in client.get("/").content.decode()  # no link either


def test_forms_without_a_csrf_token_are_refused(shop: Project) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user_with("admin", shop))
    assert client.post("/tokens/", {"project": "shop", "label": "x"}).status_code == 403
    assert not ApiToken.objects.exists()

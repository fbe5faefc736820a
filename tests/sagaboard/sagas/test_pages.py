"""Dashboard pages: who sees what, what a saga page shows, and that agent text stays text."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.models import Project, Saga, Step
from tests.support.badges import status_texts
from undo_core import Saga as EngineSaga
from undo_core import SagaRollbackError, define_tool

pytestmark = pytest.mark.django_db


def rows(page: str) -> int:
    return len(re.findall(r'<tr id="saga-\d+"', page))


XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def run_saga(project: Project, saga_id: str, *, hostile: bool = False) -> None:
    saga = EngineSaga(
        XSS if hostile else "storebot-return", saga_id=saga_id, store=DjangoStore(project)
    )
    saga.execute(define_tool("return_item", lambda i: {"note": XSS}, lambda o, i: None), {"q": XSS})

    def boom(i: Any) -> None:
        raise ConnectionError(XSS if hostile else "FedEx API returned 500")

    with pytest.raises(SagaRollbackError):
        saga.execute(define_tool("generate_label", boom), {})


@pytest.fixture
def alice(client: Client) -> tuple[Client, Project]:
    shop = Project.objects.create(slug="shop", name="Shop")
    user = get_user_model().objects.create_user("alice", password="pw-alice-123")
    shop.members.add(user)
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    return client, shop


def test_anonymous_users_are_sent_to_log_in(client: Client) -> None:
    for url in ("/", "/sagas/shop/anything/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_logging_in_and_out(client: Client) -> None:
    get_user_model().objects.create_user("bob", password="pw-bob-1234")
    assert client.post("/login/", {"username": "bob", "password": "nope"}).status_code == 200
    response = client.post("/login/", {"username": "bob", "password": "pw-bob-1234"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200
    client.post("/logout/")
    assert client.get("/").status_code == 302


def test_a_user_sees_only_their_projects_sagas(alice: tuple[Client, Project]) -> None:
    client, shop = alice
    other = Project.objects.create(slug="other", name="Other")
    run_saga(shop, "mine")
    run_saga(other, "theirs")
    page = client.get("/").content.decode()
    assert "mine" in page and "theirs" not in page
    assert client.get("/sagas/other/theirs/").status_code == 404
    assert rows(client.get("/?project=other").content.decode()) == 0
    assert client.get("/sagas/shop/mine/").status_code == 200


def test_the_saga_page_shows_steps_states_errors_attempts_and_events(
    alice: tuple[Client, Project],
) -> None:
    client, shop = alice
    run_saga(shop, "s-1")
    page = client.get("/sagas/shop/s-1/").content.decode()
    # the saga, step-1 (undone), step-2 (the failure)
    assert status_texts(page) == ["ROLLED_BACK", "ROLLED_BACK", "FAILED"]
    assert "ConnectionError: FedEx API returned 500" in page
    assert '>#1</td><td data-label="Outcome">succeeded</td>' in page  # step-1's undo attempt
    assert "PENDING → COMPLETED" in page  # the event log


def test_agent_supplied_text_is_escaped_everywhere(alice: tuple[Client, Project]) -> None:
    client, shop = alice
    run_saga(shop, "hostile", hostile=True)
    for url in ("/", "/sagas/shop/hostile/"):
        page = client.get(url).content.decode()
        assert "<script>alert" not in page and "<img src=x" not in page
        assert "&lt;script&gt;" in page


def test_filters_and_pages_keep_a_constant_number_of_queries(
    alice: tuple[Client, Project],
) -> None:
    client, shop = alice
    for n in range(3):
        run_saga(shop, f"a-{n}")

    def queries(url: str) -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200
        return len(ctx.captured_queries)

    small = queries("/")
    for n in range(8):
        run_saga(shop, f"b-{n}")
    assert queries("/") == small
    assert queries("/?status=ROLLED_BACK&tool=return_item") <= small + 1
    first = client.get("/?status=ROLLED_BACK").content.decode()
    assert rows(first) == 11
    assert Saga.objects.count() == 11 and Step.objects.count() == 22


def test_a_forged_page_link_shows_a_message_not_an_error(alice: tuple[Client, Project]) -> None:
    client, _ = alice
    response = client.get("/?cursor=not-a-cursor")
    assert response.status_code == 200 and "not valid" in response.content.decode()


def test_a_member_without_a_role_sees_nothing_and_is_told_why(client: Client) -> None:
    shop = Project.objects.create(slug="shop", name="Shop")
    run_saga(shop, "hidden")
    user = get_user_model().objects.create_user("carol", password="pw-carol-123")
    shop.members.add(user)
    client.force_login(user)
    page = client.get("/").content.decode()
    assert rows(page) == 0 and "no role yet" in page
    assert client.get("/sagas/shop/hidden/").status_code == 404
    user.groups.add(Group.objects.get(name="viewer"))
    assert rows(client.get("/").content.decode()) == 1


def test_the_roles_carry_the_documented_permissions() -> None:
    def perms(role: str) -> set[str]:
        return set(Group.objects.get(name=role).permissions.values_list("codename", flat=True))

    assert "view_saga" in perms("viewer") and "retry_compensation" not in perms("viewer")
    assert {"retry_compensation", "resolve_step"} <= perms("operator")
    assert "decide_approval" in perms("approver") and "resolve_step" not in perms("approver")
    assert "decide_approval" not in perms("operator")
    assert {"manage_policies", "add_apitoken"} <= perms("admin")
    assert "manage_policies" not in perms("approver")

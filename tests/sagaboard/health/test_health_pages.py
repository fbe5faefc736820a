"""The per-tool health pages: the table, a tool's page, scoping, bad values, empty data."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from sagaboard.health.services import tool_rollup
from sagaboard.models import Project
from tests.support.saga_rows import StepSpec, make_saga

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(client: Client) -> tuple[Client, Project]:
    shop = Project.objects.create(slug="shop", name="Shop")
    user = get_user_model().objects.create_user("alice", password="pw-alice-123")
    shop.members.add(user)
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    return client, shop


def test_the_pages_render_with_no_data(alice: tuple[Client, Project]) -> None:
    client, _ = alice
    page = client.get("/tools/")
    assert page.status_code == 200 and "No tool ran last 24 hours" in page.content.decode()
    assert 'href="/tools/"' in page.content.decode()  # in the navigation
    for window in ("hour", "day", "week"):
        one = client.get(f"/tools/charge/?window={window}")
        assert one.status_code == 200 and 'id="no-runs"' in one.content.decode()


def test_the_table_and_a_tools_page_show_its_figures(alice: tuple[Client, Project]) -> None:
    client, shop = alice
    make_saga(shop, "a", [StepSpec("charge", ms=120, undo_ms=[(40, "failed")]),
                          StepSpec("charge", "FAILED", ms=300)])  # fmt: skip
    tool_rollup.rollup_fold()
    table = client.get("/tools/?window=hour").content.decode()
    assert 'href="/tools/charge/?window=hour"' in table
    assert "50.0 %" in table and "100.0 %" in table  # 1 of 2 runs failed, 1 of 1 undos
    page = client.get("/tools/charge/?window=hour").content.decode()
    assert "<svg" in page and "<polyline" in page and "style=" not in page
    assert "2 runs, 1 failed" in page


def test_another_projects_tool_never_shows(alice: tuple[Client, Project]) -> None:
    client, shop = alice
    other = Project.objects.create(slug="other", name="Other")
    make_saga(other, "x", [StepSpec("secret_tool")])
    make_saga(shop, "y", [StepSpec("charge")])
    tool_rollup.rollup_fold()
    assert "secret_tool" not in client.get("/tools/").content.decode()
    page = client.get("/tools/secret_tool/").content.decode()
    assert 'id="no-runs"' in page
    assert client.get("/tools/?project=other").status_code == 400


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("/tools/?window=month", "window: must be one of hour, day, week"),
        ("/tools/charge/?window=", "window: must be one of"),
        ("/tools/?project=nope", "project: not one of your projects"),
        ("/tools/a%00b/", "tool holds NUL"),
        (f"/tools/{'x' * 201}/", "tool: give a tool name of 1 to 200 characters"),
    ],
)
def test_bad_values_are_a_400_naming_the_field(
    alice: tuple[Client, Project], url: str, message: str
) -> None:
    client, _ = alice
    response = client.get(url)
    assert response.status_code == 400 and message in response.content.decode()


def test_a_hostile_tool_name_stays_text(alice: tuple[Client, Project]) -> None:
    client, shop = alice
    name = "<script>alert(1)</script>"
    make_saga(shop, "h", [StepSpec(name)])
    tool_rollup.rollup_fold()
    for url in ("/tools/", "/tools/%3Cscript%3Ealert(1)%3C/script%3E/"):
        page = client.get(url).content.decode()
        assert "<script>alert(1)" not in page and "&lt;script&gt;" in page


def test_anonymous_users_are_sent_to_log_in(client: Client) -> None:
    for url in ("/tools/", "/tools/charge/"):
        assert client.get(url).status_code == 302

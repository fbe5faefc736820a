"""The live feed's batched re-check gives the same answers as the per-request rules.

``access_for_sessions`` checks every open socket's session in a few queries; what it
decides must be what Django's ``get_user`` and ``visible.projects_for_user`` decide
for the same session on an HTTP request, for every kind of user and session.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user, get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sagaboard.access.reads import visible
from sagaboard.access.services.roles import roles_sync
from sagaboard.live.access import access_for_sessions
from sagaboard.models import Project

pytestmark = pytest.mark.django_db


def person(name: str, role: str | None, *projects: Project) -> Any:
    user = get_user_model().objects.create_user(name)  # no password: no slow hashing
    if role:
        user.groups.add(Group.objects.get(name=role))
    for project in projects:
        project.members.add(user)
    return user


def login(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return str(client.cookies["sessionid"].value)


@pytest.fixture
def sessions() -> dict[str, str]:
    """Session keys of every kind of user the rules tell apart."""
    roles_sync(Group, Permission)
    shop = Project.objects.create(slug="shop", name="Shop")
    other = Project.objects.create(slug="other", name="Other")
    viewer = person("viewer", "viewer", shop)
    other.members.add(viewer)
    direct = person("direct", None, shop)  # the read permission given directly, no role
    direct.user_permissions.add(Permission.objects.get(codename="view_saga"))
    root = person("root", None)
    root.is_superuser = True
    root.save()
    found = {
        "viewer": login(viewer),
        "operator": login(person("operator", "operator", other)),
        "norole": login(person("norole", None, shop)),
        "direct": login(direct),
        "superuser": login(root),
        "nomember": login(person("nomember", "admin")),
    }
    inactive = person("inactive", "viewer", shop)
    found["inactive"] = login(inactive)
    inactive.is_active = False
    inactive.save()
    changed = person("changed", "viewer", shop)
    found["password-changed"] = login(changed)
    changed.set_password("another-password-123")
    changed.save()
    found["expired"] = login(person("expired", "viewer", shop))
    Session.objects.filter(pk=found["expired"]).update(
        expire_date=timezone.now() - timedelta(seconds=1)
    )
    found["deleted"] = login(person("deleted", "viewer", shop))
    Session.objects.filter(pk=found["deleted"]).delete()
    found["never-existed"] = "x" * 32
    return found


class Request:
    """What ``django.contrib.auth.get_user`` reads: a session."""

    def __init__(self, key: str) -> None:
        self.session = SessionStore(key)


def assert_decides_as_django(sessions: dict[str, str]) -> None:
    found = access_for_sessions(sessions.values())
    for name, key in sessions.items():
        user = get_user(Request(key))  # type: ignore[arg-type]
        expected = (
            frozenset(p.pk for p in visible.projects_for_user(user))
            if user.is_authenticated
            else frozenset()
        )
        got = found[key]
        assert (got.user.pk if got.user else None) == user.pk, name
        assert got.projects == expected, name
    assert found[sessions["viewer"]].projects  # not all empty: the comparison means something
    assert found[sessions["superuser"]].projects == frozenset(
        Project.objects.values_list("pk", flat=True)
    )


def test_the_batched_check_decides_as_djangos_get_user_and_projects_for_user(
    sessions: dict[str, str],
) -> None:
    assert_decides_as_django(sessions)


def test_the_batched_check_costs_the_same_few_queries_for_any_number_of_sessions(
    sessions: dict[str, str],
) -> None:
    with CaptureQueriesContext(connection) as one:
        access_for_sessions([sessions["viewer"]])
    with CaptureQueriesContext(connection) as all_of_them:
        access_for_sessions(list(sessions.values()) * 20)
    assert len(all_of_them.captured_queries) <= len(one.captured_queries) + 1  # + all projects
    assert len(all_of_them.captured_queries) <= 5


def test_with_another_authentication_backend_each_user_is_asked(
    sessions: dict[str, str],
) -> None:
    backends = [
        "django.contrib.auth.backends.ModelBackend",
        "django.contrib.auth.backends.AllowAllUsersModelBackend",
    ]
    with override_settings(AUTHENTICATION_BACKENDS=backends):
        assert_decides_as_django(sessions)

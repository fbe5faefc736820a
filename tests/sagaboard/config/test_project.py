"""Smoke tests for the Django project skeleton."""

import os

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client


def test_system_checks_pass() -> None:
    call_command("check", fail_level="WARNING")


@pytest.mark.django_db
def test_the_login_page_renders(client: Client) -> None:
    response = client.get("/login/")

    assert response.status_code == 200
    assert 'name="csrfmiddlewaretoken"' in response.content.decode()


@pytest.mark.django_db
def test_database_vendor_matches_database_url() -> None:
    url = os.environ.get("DATABASE_URL", "")
    expected = "postgresql" if url.startswith(("postgres://", "postgresql://")) else "sqlite"

    assert connection.vendor == expected

"""Smoke tests for the Django project skeleton."""

import os

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse


def test_system_checks_pass() -> None:
    call_command("check", fail_level="WARNING")


@pytest.mark.django_db
def test_home_page_renders_and_links_to_admin(client: Client) -> None:
    response = client.get("/")

    assert response.status_code == 200
    assert f'href="{reverse("admin:index")}"' in response.content.decode()


@pytest.mark.django_db
def test_database_vendor_matches_database_url() -> None:
    url = os.environ.get("DATABASE_URL", "")
    expected = "postgresql" if url.startswith(("postgres://", "postgresql://")) else "sqlite"

    assert connection.vendor == expected

"""Tokens a web process has checked are cached, and a change to one is seen on the next request.

The cache (sagaboard.access.services.tokens) saves each API request the token's join and
keeps one indexed read, the token version, which database triggers move with every change
to a token or a project. What an agent and an operator depend on: a revoked token is
refused on the very next request, in this process and in every other one, whoever revoked
it and however; a token moved to another project is scoped to the new one at once.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sagaboard.access.services.tokens import token_authenticate, token_create, token_revoke
from sagaboard.models import ApiToken, ApiTokenVersion, Project
from tests.support.live_server import Server, manage, prepare, temp_database

PG = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def queries_of(raw: str) -> tuple[ApiToken | None, int]:
    with CaptureQueriesContext(connection) as ctx:
        found = token_authenticate(raw)
    return found, len(ctx.captured_queries)


def version() -> int:
    return ApiTokenVersion.objects.get(id=1).number


@pytest.mark.django_db
def test_a_checked_token_costs_one_indexed_read_on_its_next_request(shop: Project) -> None:
    raw = token_create(project=shop, label="agent").secret
    first, cold = queries_of(raw)
    again, warm = queries_of(raw)
    assert first is not None and again is not None
    assert (again.pk, again.project.pk, again.project.slug) == (first.pk, shop.pk, "shop")
    assert cold == 3  # the version, the token's join, "last used" (once a minute)
    assert warm == 1  # the version only


@pytest.mark.django_db
def test_a_wrong_secret_with_a_cached_tokens_prefix_is_refused(shop: Project) -> None:
    raw = token_create(project=shop, label="agent").secret
    assert token_authenticate(raw) is not None
    assert token_authenticate(raw[:-4] + "AAAA") is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change",
    [
        "revoked in the dashboard",
        "revoked by SQL by hand",
        "deleted",
        "its project deleted",
    ],
)
def test_a_token_changed_after_its_check_is_refused_on_the_next_request(
    shop: Project, change: str
) -> None:
    minted = token_create(project=shop, label="agent")
    assert token_authenticate(minted.secret) is not None
    before = version()
    if change == "revoked in the dashboard":
        token_revoke(token=minted.token, reason="leaked")
    elif change == "revoked by SQL by hand":
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE sagaboard_apitoken SET revoked_at = %s WHERE id = %s",
                ["2026-12-07 00:00:00", minted.token.pk],
            )
    elif change == "deleted":
        ApiToken.objects.filter(pk=minted.token.pk).delete()
    else:
        shop.delete()
    assert version() > before
    assert token_authenticate(minted.secret) is None


@pytest.mark.django_db
def test_a_token_moved_to_another_project_is_scoped_to_it_at_once(shop: Project) -> None:
    other = Project.objects.create(slug="other", name="Other")
    minted = token_create(project=shop, label="agent")
    assert token_authenticate(minted.secret).project.pk == shop.pk  # type: ignore[union-attr]
    ApiToken.objects.filter(pk=minted.token.pk).update(project=other)
    assert token_authenticate(minted.secret).project.pk == other.pk  # type: ignore[union-attr]
    Project.objects.filter(pk=other.pk).update(slug="renamed")
    assert token_authenticate(minted.secret).project.slug == "renamed"  # type: ignore[union-attr]


@pytest.mark.django_db
def test_marking_a_token_used_does_not_empty_every_process_cache(shop: Project) -> None:
    minted = token_create(project=shop, label="agent")
    before = version()
    token_authenticate(minted.secret)  # writes "last used"
    assert ApiToken.objects.get(pk=minted.token.pk).last_used_at is not None
    assert version() == before


@pytest.mark.django_db(transaction=True)
def test_a_flushed_version_row_is_made_again_and_no_token_outlives_it(shop: Project) -> None:
    raw = token_create(project=shop, label="agent").secret
    assert token_authenticate(raw) is not None
    cached_under = version()
    ApiTokenVersion.objects.all().delete()  # as `flush` does, with the tokens
    ApiToken.objects.all().delete()
    assert token_authenticate(raw) is None
    assert version() != cached_under  # made again, at a number the cache never held
    fresh = token_create(project=shop, label="again").secret
    assert token_authenticate(fresh) is not None
    assert queries_of(fresh)[1] == 1


def call(server: Server, raw: str) -> int:
    """An agent's call: the rollbacks operators asked for (what the SDK polls)."""
    headers = {"Authorization": f"Bearer {raw}"}
    return httpx.get(f"{server.url}/api/v1/rollback-requests", headers=headers).status_code


@pytest.mark.slow
def test_a_token_revoked_by_a_command_is_refused_next_by_two_web_processes(
    tmp_path: Path,
) -> None:
    """Two gunicorn web processes on one database, each with the token cached (several
    requests each), then ``sagaboard_token revoke`` in a third process: the next request
    to each web process is refused."""
    with temp_database("postgres" if PG else "sqlite", tmp_path) as url:
        raw = prepare(url)
        with Server(url, server="gunicorn") as one, Server(url, server="gunicorn") as two:
            for _ in range(3):
                assert (call(one, raw), call(two, raw)) == (200, 200)
            manage(url, "sagaboard_token", "revoke", raw.split("_")[1])
            assert (call(one, raw), call(two, raw)) == (401, 401)
            assert (call(one, raw), call(two, raw)) == (401, 401)

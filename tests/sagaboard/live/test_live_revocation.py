"""An open live feed follows permissions as they change, not only as they were at connect.

For every way a user can lose sight of what a page shows (logout, a session gone,
deactivation, deletion, removal from the project, a role taken away, the project
deleted), an open socket on the saga list and on a saga page is closed with the
documented code (4401 no longer logged in, 4403 no longer allowed) and sends
nothing after the change. Changes made through the app are pushed to the sockets
(the re-check interval is a minute here, so only the push can close them in time);
changes made behind the app's back are caught by the periodic re-check (a fifth of
a second here). A user who may still see the page keeps receiving.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.sessions.models import Session
from django.db import OperationalError
from django.test import Client, override_settings

from sagaboard.access.reads.visible import last_event_id
from sagaboard.access.services.roles import roles_sync
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.live.access import access_for_sessions
from sagaboard.live.relay import stop_all
from sagaboard.models import Project, Saga
from tests.support.live_feed import TOOL, feed, received, run_saga
from undo_core import Saga as EngineSaga

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

PUSHED_WITHIN = 3.0  # seconds: a pushed revocation arrives in milliseconds
RECHECK = 0.2  # the backstop's interval in the tests that rely on it


@database_sync_to_async
def setup() -> dict[str, Any]:
    roles_sync(Group, Permission)  # transactional tests flush what migrations created
    shop = Project.objects.create(slug="shop", name="Shop")
    other = Project.objects.create(slug="other", name="Other")
    users = get_user_model().objects
    alice = users.create_user("alice", password="pw-alice-123")
    alice.groups.add(Group.objects.get(name="viewer"))
    shop.members.add(alice)
    other.members.add(alice)
    browser = Client()
    browser.force_login(alice)
    # The saga the saga page shows, still running: completing it later makes new events.
    engine = EngineSaga("checkout-flow", saga_id="watched", store=DjangoStore(shop))
    engine.execute(TOOL, {"sku": "A-1"})
    return {
        "shop": shop,
        "other": other,
        "alice": alice,
        "browser": browser,
        "cookie": browser.cookies["sessionid"].value,
        "engine": engine,
        "watched": Saga.objects.get(saga_id="watched").pk,
    }


@pytest.fixture
async def world() -> AsyncIterator[dict[str, Any]]:
    with override_settings(SAGABOARD_LIVE_RECHECK_SECONDS=60):
        yield await setup()
        stop_all()


async def open_feed(world: dict[str, Any], page: str, cookie: str | None = None) -> Any:
    """A connected socket of alice's on ``page`` ("list" or "saga"), from the log's end."""
    after = await database_sync_to_async(last_event_id)()
    query = "list=1" if page == "list" else f"saga={world['watched']}"
    comm = feed(f"{query}&after={after}", cookie or world["cookie"])
    assert (await comm.connect())[0]
    assert await comm.receive_nothing(timeout=0.1)  # nothing to catch up on
    return comm


async def assert_closed_and_silent(
    comm: WebsocketCommunicator, code: int, world: dict[str, Any], within: float
) -> None:
    """The next thing the socket does is close with ``code``; then a new saga sends nothing."""
    message = await comm.receive_output(timeout=within)
    assert message == {"type": "websocket.close", "code": code}, message
    await more_of_shop(world)
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()  # what the server does on the close it sent


async def more_of_shop(world: dict[str, Any]) -> None:
    """New events for both pages: the watched saga completes, and a new saga runs."""
    if await database_sync_to_async(Project.objects.filter(pk=world["shop"].pk).exists)():
        await database_sync_to_async(world["engine"].complete)()
        await run_saga(world["shop"], "after-the-change")


def change(fn: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, Any]], Any]:
    return database_sync_to_async(fn)


def _logout(w: dict[str, Any]) -> None:
    assert w["browser"].post("/logout/").status_code == 302


def _deactivate(w: dict[str, Any]) -> None:
    w["alice"].is_active = False
    w["alice"].save()


def _new_password(w: dict[str, Any]) -> None:
    # Another session changes the password: every other session of the user ends.
    w["alice"].set_password("a-new-password-456")
    w["alice"].save()


PUSHED_UNAUTHENTICATED = {
    "logout": _logout,
    "deactivated": _deactivate,
    "deleted": lambda w: w["alice"].delete(),
    "password-changed-elsewhere": _new_password,
}
PUSHED_FORBIDDEN = {
    "removed-from-the-project": lambda w: w["shop"].members.remove(w["alice"]),
    "project-removed-from-the-user": lambda w: w["alice"].sagaboard_projects.remove(w["shop"]),
    "project-members-cleared": lambda w: w["shop"].members.clear(),
    "members-set-as-the-admin-form-does": lambda w: w["shop"].members.set([]),
    "roles-set-as-the-admin-form-does": lambda w: w["alice"].groups.set([]),
    "role-taken-away": lambda w: w["alice"].groups.remove(Group.objects.get(name="viewer")),
    "user-taken-out-of-the-role": lambda w: Group.objects.get(name="viewer").user_set.remove(
        w["alice"]
    ),
    "role-loses-the-read-permission": lambda w: Group.objects.get(name="viewer").permissions.remove(
        Permission.objects.get(codename="view_saga")
    ),
}


@pytest.mark.parametrize("page", ["list", "saga"])
@pytest.mark.parametrize("how", list(PUSHED_UNAUTHENTICATED))
async def test_a_session_that_ends_through_the_app_closes_its_feed_with_4401_at_once(
    world: dict[str, Any], page: str, how: str
) -> None:
    comm = await open_feed(world, page)
    await change(PUSHED_UNAUTHENTICATED[how])(world)
    await assert_closed_and_silent(comm, 4401, world, PUSHED_WITHIN)


@pytest.mark.parametrize("page", ["list", "saga"])
@pytest.mark.parametrize("how", list(PUSHED_FORBIDDEN))
async def test_losing_sight_of_the_project_through_the_app_closes_the_feed_with_4403_at_once(
    world: dict[str, Any], page: str, how: str
) -> None:
    comm = await open_feed(world, page)
    await change(PUSHED_FORBIDDEN[how])(world)
    await assert_closed_and_silent(comm, 4403, world, PUSHED_WITHIN)


@pytest.mark.parametrize("page", ["list", "saga"])
async def test_a_deleted_project_closes_the_feeds_that_show_it(
    world: dict[str, Any], page: str
) -> None:
    comm = await open_feed(world, page)
    await change(lambda w: w["shop"].delete())(world)
    await assert_closed_and_silent(comm, 4403, world, PUSHED_WITHIN)


BEHIND_THE_APPS_BACK = {
    "session-row-deleted": (4401, lambda w: Session.objects.filter(pk=w["cookie"]).delete()),
    "deactivated-by-sql": (
        4401,
        lambda w: get_user_model().objects.filter(pk=w["alice"].pk).update(is_active=False),
    ),
    "membership-row-deleted": (
        4403,
        lambda w: Project.members.through.objects.filter(project=w["shop"]).delete(),
    ),
}


@pytest.mark.parametrize("page", ["list", "saga"])
@pytest.mark.parametrize("how", list(BEHIND_THE_APPS_BACK))
async def test_a_change_behind_the_apps_back_closes_the_feed_within_the_recheck_interval(
    world: dict[str, Any], page: str, how: str
) -> None:
    code, fn = BEHIND_THE_APPS_BACK[how]
    with override_settings(SAGABOARD_LIVE_RECHECK_SECONDS=RECHECK):
        comm = await open_feed(world, page)
        await change(fn)(world)
        await assert_closed_and_silent(comm, code, world, RECHECK * 10)


async def test_the_recheck_closes_nothing_while_the_session_is_still_good(
    world: dict[str, Any],
) -> None:
    with override_settings(SAGABOARD_LIVE_RECHECK_SECONDS=RECHECK / 4):
        comm = await open_feed(world, "list")
        assert await comm.receive_nothing(timeout=RECHECK * 2)  # several re-checks, no close
        pk = await run_saga(world["shop"], "still-watched")
        await received(comm, rf'id="saga-{pk}"')
        await comm.disconnect()


KEPT = {
    "another-role-added-then-removed": lambda w: [
        w["alice"].groups.add(Group.objects.get(name="operator")),
        w["alice"].groups.remove(Group.objects.get(name="operator")),
    ],
    "another-session-logged-out": lambda w: _second_session_logs_out(w),
    "saved-without-a-change": lambda w: w["alice"].save(),
}


def _second_session_logs_out(w: dict[str, Any]) -> None:
    other = Client()
    other.force_login(w["alice"])
    assert other.post("/logout/").status_code == 302


@pytest.mark.parametrize("how", list(KEPT))
async def test_a_change_that_leaves_the_page_visible_keeps_the_feed(
    world: dict[str, Any], how: str
) -> None:
    comm = await open_feed(world, "list")
    await change(KEPT[how])(world)
    assert await comm.receive_nothing(timeout=0.3)
    pk = await run_saga(world["shop"], "still-watched")
    await received(comm, rf'id="saga-{pk}"')
    await comm.disconnect()


async def test_a_saga_page_stays_open_when_another_project_is_taken_away(
    world: dict[str, Any],
) -> None:
    comm = await open_feed(world, "saga")
    await change(lambda w: w["other"].members.remove(w["alice"]))(world)
    assert await comm.receive_nothing(timeout=0.3)
    await more_of_shop(world)
    await received(comm, rf'(?s)id="saga-live-{world["watched"]}".*COMPLETED')
    await comm.disconnect()


async def test_a_list_closes_when_any_project_it_shows_is_taken_away(
    world: dict[str, Any],
) -> None:
    comm = await open_feed(world, "list")  # shows shop and other
    await change(lambda w: w["other"].members.remove(w["alice"]))(world)
    await assert_closed_and_silent(comm, 4403, world, PUSHED_WITHIN)


async def test_every_tab_of_a_logged_out_session_closes_and_another_users_tab_does_not(
    world: dict[str, Any],
) -> None:
    @database_sync_to_async
    def bob() -> str:
        user = get_user_model().objects.create_user("bob")
        user.groups.add(Group.objects.get(name="viewer"))
        world["shop"].members.add(user)
        client = Client()
        client.force_login(user)
        return str(client.cookies["sessionid"].value)

    bobs = await open_feed(world, "list", cookie=await bob())
    tabs = [await open_feed(world, "list"), await open_feed(world, "saga")]
    await change(_logout)(world)
    for tab in tabs:
        assert await tab.receive_output(timeout=PUSHED_WITHIN) == {
            "type": "websocket.close",
            "code": 4401,
        }
        await tab.disconnect()
    pk = await run_saga(world["shop"], "for-bob")
    await received(bobs, rf'id="saga-{pk}"')
    await bobs.disconnect()


async def test_the_tabs_of_one_session_share_one_check_per_revocation(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[set[str]] = []

    def counting(keys: Any) -> Any:
        checked.append(set(keys))
        return access_for_sessions(keys)

    monkeypatch.setattr("sagaboard.live.consumers.access_for_sessions", counting)
    tabs = [await open_feed(world, "list") for _ in range(5)]
    assert checked == [{world["cookie"]}] * 5  # each tab checks its session as it joins
    checked.clear()
    await change(lambda w: w["alice"].save())(world)  # a re-check that keeps them all
    for tab in tabs:
        assert await tab.receive_nothing(timeout=0.2)
    assert checked == [{world["cookie"]}]
    for tab in tabs:
        await tab.disconnect()


async def test_a_recheck_that_fails_closes_the_feed_for_the_browser_to_reconnect(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(keys: Any) -> Any:
        raise OperationalError("the database is down")

    comm = await open_feed(world, "list")
    monkeypatch.setattr("sagaboard.live.consumers.access_for_sessions", unreachable)
    await change(lambda w: w["alice"].save())(world)
    assert await comm.receive_output(timeout=PUSHED_WITHIN) == {
        "type": "websocket.close",
        "code": 1013,  # "try again later": htmx's websocket extension reconnects
    }
    await comm.disconnect()


async def test_a_session_ended_while_the_socket_joins_is_closed_at_once(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handshake read the session before the socket joined its groups: a logout in
    between (its message sent before the join) is caught by the check after the join.
    Here the session ends just before that check reads it."""

    @database_sync_to_async
    def ended_then_checked(session_key: str) -> Any:
        Session.objects.filter(session_key=session_key).delete()
        return access_for_sessions([session_key])[session_key]

    monkeypatch.setattr("sagaboard.live.consumers._access_of", ended_then_checked)
    comm = feed("list=1", world["cookie"])
    connected, _ = await comm.connect()
    assert connected  # accepted, then closed with the code (not an HTTP 403)
    assert await comm.receive_output(timeout=PUSHED_WITHIN) == {
        "type": "websocket.close",
        "code": 4401,
    }
    await comm.disconnect()

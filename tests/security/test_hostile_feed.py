"""A logged-in browser cannot stop the live feed for the others with the URL it connects to.

The relay of a web process starts at the first browser's ``after`` (the newest
event its page was rendered with). A browser that claims an ``after`` beyond
the end of the event log (any logged-in user can: it is the query string)
must not move the relay past events still to come.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client

from sagaboard.access.reads.visible import last_event_id
from sagaboard.access.services.roles import roles_sync
from sagaboard.config.asgi import application
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.live.relay import stop_all
from sagaboard.models import Project
from undo_core import Saga as EngineSaga
from undo_core import define_tool

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _consumers_keep_the_test_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    # The consumer runs on this thread's connection (async_to_sync from a sync test);
    # Channels' closing of "old" connections would end the test's transaction.
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)


def _browser(project: Project, name: str, role: str | None) -> str:
    roles_sync(Group, Permission)
    user = get_user_model().objects.create_user(name)
    if role:
        user.groups.add(Group.objects.get(name=role))
    project.members.add(user)
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def _feed(query: str, session: str) -> WebsocketCommunicator:
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"cookie", f"sessionid={session}".encode()),
    ]
    return WebsocketCommunicator(application, f"/ws/sagas/?{query}", headers=headers)


def _saga(project: Project, saga_id: str) -> None:
    saga = EngineSaga("checkout", saga_id=saga_id, store=DjangoStore(project))
    saga.execute(define_tool("reserve", lambda i: {"ok": True}, lambda o, i: None), {})
    saga.complete()


_run_saga = database_sync_to_async(_saga)


@pytest.mark.parametrize("after", [10**18, 10**30], ids=["past-the-log", "past-bigint"])
def test_an_after_beyond_the_log_does_not_freeze_the_others_feed(after: int) -> None:
    shop = Project.objects.create(slug="shop", name="Shop")
    _saga(shop, "before")
    hostile = _browser(shop, "mallory", None)  # logged in, not even a role
    honest = _browser(shop, "victor", "viewer")

    async def scenario() -> Any:
        first = _feed(f"list=1&after={after}", hostile)  # the first browser: starts the relay
        assert (await first.connect())[0]
        newest = await database_sync_to_async(last_event_id)()
        second = _feed(f"list=1&after={newest}", honest)
        assert (await second.connect())[0]
        await _run_saga(shop, "after-the-hostile-browser")
        try:
            for _ in range(100):
                text = await second.receive_from(timeout=5)
                if "after-the-hostile-browser" in text:
                    return True
            return False
        except TimeoutError:
            return False
        finally:
            await first.disconnect(timeout=10)
            stop_all()

    assert async_to_sync(scenario)(), "the honest browser never heard of the new saga"

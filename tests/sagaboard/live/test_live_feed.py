"""The live feed over websockets: who may connect, what reaches whom, and catching up."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client

from sagaboard.access.reads.visible import last_event_id
from sagaboard.access.services.roles import roles_sync
from sagaboard.live.relay import project_group, relay, stop_all
from sagaboard.models import Project
from tests.support.badges import status_texts
from tests.support.live_feed import feed, received, run_saga

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@database_sync_to_async
def setup_users() -> dict[str, Any]:
    shop = Project.objects.create(slug="shop", name="Shop")
    other = Project.objects.create(slug="other", name="Other")
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    shop.members.add(alice)
    roles_sync(Group, Permission)  # transactional tests flush what migrations created
    alice.groups.add(Group.objects.get(name="viewer"))
    client = Client()
    client.force_login(alice)
    return {"shop": shop, "other": other, "cookie": client.cookies["sessionid"].value}


@pytest.fixture
async def world() -> AsyncIterator[dict[str, Any]]:
    yield await setup_users()
    stop_all()


async def test_anonymous_connections_are_closed_with_4401_and_sent_nothing(
    world: dict[str, Any],
) -> None:
    comm = feed("list=1", cookie=None)
    connected, _ = await comm.connect()
    assert connected  # accepted, so that the browser sees the close code
    assert await comm.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}


async def test_a_change_made_elsewhere_reaches_the_list_live(world: dict[str, Any]) -> None:
    comm = feed(f"list=1&after={await database_sync_to_async(last_event_id)()}", world["cookie"])
    connected, _ = await comm.connect()
    assert connected
    pk = await run_saga(world["shop"], "live-1")
    html = await received(comm, rf'id="saga-{pk}"')
    assert 'hx-swap-oob="afterbegin:#saga-rows"' in html and "live-1" in html
    await comm.disconnect()


async def test_other_projects_events_never_arrive(world: dict[str, Any]) -> None:
    comm = feed(f"list=1&after={await database_sync_to_async(last_event_id)()}", world["cookie"])
    await comm.connect()
    await run_saga(world["other"], "not-yours")
    assert await comm.receive_nothing(timeout=1.0)
    await comm.disconnect()


async def test_a_reconnecting_browser_catches_up_on_what_it_missed(world: dict[str, Any]) -> None:
    before = await database_sync_to_async(last_event_id)()
    pk = await run_saga(world["shop"], "while-away")  # no browser connected
    comm = feed(f"list=1&after={before}", world["cookie"])
    await comm.connect()
    html = await received(comm, rf'id="saga-{pk}"')
    assert status_texts(html) == ["COMPLETED"]
    await comm.disconnect()


async def test_a_dropped_message_is_refilled_from_the_log(world: dict[str, Any]) -> None:
    comm = feed(f"list=1&after={await database_sync_to_async(last_event_id)()}", world["cookie"])
    await comm.connect()
    first = await run_saga(world["shop"], "first")
    await received(comm, rf'id="saga-{first}"')
    seen = await database_sync_to_async(last_event_id)()
    # Every message the relay sends for the second saga (and every tail) is lost...
    layer = get_channel_layer()

    async def dropped(group: str, message: dict[str, Any]) -> None:
        return None

    layer.group_send = dropped
    try:
        second = await run_saga(world["shop"], "second")
        top = await database_sync_to_async(last_event_id)()
        for _ in range(200):  # until the relay has sent (and lost) them, bounded
            if relay().last_per_project.get(world["shop"].pk) == top:
                break
            await asyncio.sleep(0.025)
        assert top - 1 > seen  # the saga wrote several events: the browser missed some
        # ...but one: the saga's last event, whose predecessor the browser never saw.
        await type(layer).group_send(
            layer,
            project_group(world["shop"].pk),
            {"type": "saga.event", "project": world["shop"].pk, "log_id": top,
             "prev": top - 1, "saga_pk": second},
        )  # fmt: skip
        html = await received(comm, rf'id="saga-{second}"')
    finally:
        del layer.group_send  # the class's own again
    assert status_texts(html) == ["COMPLETED"]
    await comm.disconnect()


async def test_the_last_messages_of_a_burst_are_refilled_even_when_nothing_follows(
    world: dict[str, Any],
) -> None:
    comm = feed(f"list=1&after={await database_sync_to_async(last_event_id)()}", world["cookie"])
    await comm.connect()
    first = await run_saga(world["shop"], "before-the-burst")
    await received(comm, rf'id="saga-{first}"')
    # The browser's buffer is full while the burst's last events are relayed: every one
    # of their messages is dropped, and no event comes after them to reveal the gap.
    layer = get_channel_layer()

    async def dropped(group: str, message: dict[str, Any]) -> None:
        return None  # as the in-memory layer does when a receiver's queue is full

    layer.group_send = dropped
    try:
        last = await run_saga(world["shop"], "end-of-the-burst")
        top = await database_sync_to_async(last_event_id)()
        for _ in range(200):  # until the relay has sent (and lost) them, bounded
            if relay().last_per_project.get(world["shop"].pk) == top:
                break
            await asyncio.sleep(0.025)
    finally:
        del layer.group_send  # the class's own again
    html = await received(comm, rf'id="saga-{last}"')
    assert "end-of-the-burst" in html
    await comm.disconnect()


async def test_a_saga_page_gets_its_own_saga_only(world: dict[str, Any]) -> None:
    mine = await run_saga(world["shop"], "watched")
    after = await database_sync_to_async(last_event_id)()
    comm = feed(f"saga={mine}&after={after}", world["cookie"])
    await comm.connect()
    await run_saga(world["shop"], "someone-else")
    assert await comm.receive_nothing(timeout=1.0)
    await comm.disconnect()


async def test_a_burst_piled_up_behind_a_slow_render_arrives_whole_in_few_renders(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rendering one row per event, a busy process fell further behind its relay with every
    # burst (the topology test lost the tail of a run so): what piles up while a render
    # runs is rendered together in the next one.
    from sagaboard.access.reads import visible

    calls: list[str] = []

    def slow(read: Any) -> Any:
        def reading(*args: Any) -> Any:
            calls.append(read.__name__)
            time.sleep(0.15)  # a loaded database
            return read(*args)

        return reading

    for name in ("saga_row", "saga_rows"):  # one saga's row, several at once
        monkeypatch.setattr(visible, name, slow(getattr(visible, name)))
    comm = feed(f"list=1&after={await database_sync_to_async(last_event_id)()}", world["cookie"])
    await comm.connect()
    pks = [await run_saga(world["shop"], f"burst-{n}") for n in range(6)]
    texts: list[str] = []
    while not all(any(f'id="saga-{pk}"' in t for t in texts) for pk in pks):
        texts.append(await comm.receive_from(timeout=10))  # fails the test when none comes
    assert len(calls) < len(texts) / 2, calls  # events rendered together, not one by one
    await comm.disconnect()


async def test_a_relay_that_cannot_read_says_updates_are_delayed_then_catches_up(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sagaboard.live import relay as relay_module

    comm = feed(f"list=1&after={await database_sync_to_async(last_event_id)()}", world["cookie"])
    await comm.connect()
    real = relay_module._events_after

    async def failing(*args: Any) -> Any:
        raise ConnectionError("the channel layer is away")  # what Redis going down raises

    monkeypatch.setattr(relay_module, "_events_after", failing)
    html = await received(comm, 'id="live-state"')
    assert 'data-state="degraded"' in html and "Live updates delayed" in html
    pk = await run_saga(world["shop"], "while-degraded")  # committed, not relayed
    assert await comm.receive_nothing(timeout=0.5)
    monkeypatch.setattr(relay_module, "_events_after", real)
    texts: list[str] = []  # the state and what it missed (from the log), in either order
    while not (
        any('id="live-state"' in t for t in texts) and any(f'id="saga-{pk}"' in t for t in texts)
    ):
        texts.append(await comm.receive_from(timeout=5))
    state = next(t for t in texts if 'id="live-state"' in t)
    assert 'data-state="live"' in state and "hidden" not in state
    row = next(t for t in texts if f'id="saga-{pk}"' in t)
    assert status_texts(row) == ["COMPLETED"]
    await comm.disconnect()

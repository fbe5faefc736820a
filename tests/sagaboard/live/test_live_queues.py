"""Live work queues: a new approval appears in every approver's queue, a decision removes it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import Group, Permission
from django.test import Client

from sagaboard.access.reads.visible import last_event_id
from sagaboard.access.services.roles import roles_sync
from sagaboard.actions.services import runner
from sagaboard.approvals.services import approvals
from sagaboard.live.relay import stop_all
from sagaboard.models import Approval, Project
from tests.support.hitl import person, storebot_server_saga
from tests.support.live_feed import feed, received, run_saga

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@database_sync_to_async
def setup() -> dict[str, Any]:
    roles_sync(Group, Permission)  # transactional tests flush what migrations created
    shop = Project.objects.create(slug="shop", name="Shop")
    ann = person("ann", "approver", shop)
    client = Client()
    client.force_login(ann)
    return {"shop": shop, "ann": ann, "cookie": client.cookies["sessionid"].value}


@pytest.fixture
async def world() -> AsyncIterator[dict[str, Any]]:
    yield await setup()
    stop_all()


async def watching(view: str, cookie: str) -> Any:
    """A connected feed of ``view`` (``queue=1``...), from the log's end as a page would be."""
    comm = feed(f"{view}&after={await database_sync_to_async(last_event_id)()}", cookie)
    connected, _ = await comm.connect()
    assert connected
    return comm


@database_sync_to_async
def worker_reaches_an_approval(shop: Project, saga_id: str, **options: Any) -> Approval | None:
    saga = storebot_server_saga(shop, saga_id, **options)
    runner.rollback_continue(saga.pk)
    return Approval.objects.filter(saga=saga).first()


async def test_a_new_approval_appears_and_a_decision_removes_it(world: dict[str, Any]) -> None:
    comm = await watching("queue=1", world["cookie"])
    approval = await worker_reaches_an_approval(world["shop"], "s-1")
    assert approval is not None
    text = await received(comm, rf'id="approval-{approval.pk}"')
    assert 'hx-swap-oob="beforeend:#approval-items"' in text and "refund_payment" in text
    assert "csrfmiddlewaretoken" not in text  # shared fragments carry nobody's token

    cat = await database_sync_to_async(person)("cat", "approver", world["shop"])
    await database_sync_to_async(approvals.approval_decide)(
        approval_id=approval.pk, user=cat, decision="approve", reason="ok"
    )
    gone = await received(comm, rf'id="approval-{approval.pk}" hx-swap-oob="delete"')
    assert "refund_payment" not in gone
    await comm.disconnect()


async def test_failed_undos_reach_the_attention_page_live(world: dict[str, Any]) -> None:
    comm = await watching("attention=1", world["cookie"])
    await worker_reaches_an_approval(
        world["shop"], "f-1", refund_needs_approval=False, return_fails_first=3
    )
    text = await received(comm, r'id="attention-body" hx-swap-oob="true"')
    assert "return_item" in text and "upstream timed out" in text
    await comm.disconnect()


async def test_the_overview_shows_a_new_failure_live_with_fresh_counts(
    world: dict[str, Any],
) -> None:
    # The counts are cached for the page (10 s); the live overview reads them again.
    from sagaboard.health.reads import overview

    await database_sync_to_async(overview.status_counts)([world["shop"]])
    comm = await watching("overview=1", world["cookie"])
    await worker_reaches_an_approval(
        world["shop"], "f-2", refund_needs_approval=False, return_fails_first=3
    )
    text = await received(comm, r'id="overview-live" hx-swap-oob="true"')
    assert "Needs attention" in text and "Sagas by status" in text
    # Every event of the burst up to the failed undo, in one or a few sends (at most one
    # per 2 s): the last one shows the failed undo and its saga counted.
    while "return_item" not in text:
        text = await received(comm, r'id="overview-live"')
    assert "upstream timed out" in text
    assert "csrfmiddlewaretoken" not in text
    await comm.disconnect()


@pytest.mark.slow  # waits out a burst's coalescing
async def test_a_burst_of_events_reaches_the_overview_as_a_few_sends(
    world: dict[str, Any],
) -> None:
    comm = await watching("overview=1", world["cookie"])
    before = await database_sync_to_async(last_event_id)()
    for n in range(5):
        await run_saga(world["shop"], f"burst-{n}")
    events = await database_sync_to_async(last_event_id)() - before
    sends = [await received(comm, r'id="overview-live"')]
    while not await comm.receive_nothing(timeout=2.5):  # the pause is 2 s
        sends.append(await comm.receive_from())
    # At once, then at most once per 2 s, always once after the last event: a couple of
    # sends for the whole burst, not one per event; the last counts every saga.
    assert events >= 15 and 2 <= len(sends) < events / 3, (events, len(sends))
    assert re.search(r"COMPLETED</span>\s*<strong>5</strong>", sends[-1]), sends[-1]
    await comm.disconnect()


async def test_a_page_without_a_live_body_hears_a_ping_for_its_badges(
    world: dict[str, Any],
) -> None:
    comm = feed("badges=1", world["cookie"])
    connected, _ = await comm.connect()
    assert connected
    await run_saga(world["shop"], "quiet-1")  # nobody's: no badge counts it
    assert await comm.receive_nothing(timeout=1.5)
    await worker_reaches_an_approval(world["shop"], "ping-1")
    text = await received(comm, r'id="live-ping"')
    assert text == '<span id="live-ping" hx-swap-oob="true"></span>'  # no saga content
    await comm.disconnect()


async def test_the_badges_feed_is_refused_without_a_login(world: dict[str, Any]) -> None:
    comm = feed("badges=1", None)
    connected, _ = await comm.connect()
    assert connected  # accepted, then closed at once (4401)
    assert (await comm.receive_output(timeout=2))["code"] == 4401

"""The overview page: counts, what needs a person, recent failures and throughput, scoped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.health.reads import overview
from sagaboard.models import Project, Saga, Step
from undo_core import Saga as EngineSaga
from undo_core import SagaRollbackError, define_tool

pytestmark = pytest.mark.django_db

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def stuck_saga(project: Project, saga_id: str, error: str = "Stripe API timed out") -> None:
    """refund_payment's undo fails after generate_label fails: ROLLBACK_FAILED."""

    def undo_fails(o: Any, i: Any) -> None:
        raise TimeoutError(error)

    def label_fails(i: Any) -> None:
        raise ConnectionError("FedEx API returned 500")

    saga = EngineSaga("storebot-return", saga_id=saga_id, store=DjangoStore(project))
    saga.execute(define_tool("refund_payment", lambda i: {"refund": 1}, undo_fails), {})
    with pytest.raises(SagaRollbackError):
        saga.execute(define_tool("generate_label", label_fails), {})


def completed_saga(project: Project, saga_id: str) -> None:
    saga = EngineSaga("checkout", saga_id=saga_id, store=DjangoStore(project))
    saga.execute(define_tool("reserve_stock", lambda i: 1, lambda o, i: None), {})
    saga.complete()


@pytest.fixture
def world(client: Client) -> dict[str, Any]:
    cache.clear()
    shop = Project.objects.create(slug="shop", name="Shop")
    other = Project.objects.create(slug="other", name="Other")
    user = get_user_model().objects.create_user("alice", password="pw-alice-123")
    shop.members.add(user)
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    return {"client": client, "shop": shop, "other": other}


def test_counts_needs_attention_and_failures_show_only_my_projects(world: dict[str, Any]) -> None:
    shop, other = world["shop"], world["other"]
    stuck_saga(shop, "mine-stuck")
    completed_saga(shop, "mine-ok")
    stuck_saga(other, "theirs-stuck", error="their secret error")
    page = world["client"].get("/overview/").content.decode()
    assert "mine-stuck" in page and "Stripe API timed out" in page
    assert "theirs-stuck" not in page and "their secret error" not in page
    counts = {c.status: c.count for c in overview.status_counts([shop])}
    assert counts["ROLLBACK_FAILED"] == 1 and counts["COMPLETED"] == 1
    assert counts["ROLLED_BACK"] == 0


def test_counts_stop_at_the_cap_and_say_so(world: dict[str, Any]) -> None:
    for n in range(3):
        completed_saga(world["shop"], f"ok-{n}")
    by_status = {c.status: c for c in overview.status_counts([world["shop"]], cap=2)}
    assert (by_status["COMPLETED"].count, by_status["COMPLETED"].capped) == (2, True)
    assert (by_status["FAILED"].count, by_status["FAILED"].capped) == (0, False)


def test_agent_text_on_the_overview_is_escaped(world: dict[str, Any]) -> None:
    stuck_saga(world["shop"], "hostile", error=XSS)
    page = world["client"].get("/overview/").content.decode()
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert" in page


def test_the_overview_costs_the_same_queries_at_any_size(world: dict[str, Any]) -> None:
    client = world["client"]

    def queries() -> int:
        cache.clear()
        with CaptureQueriesContext(connection) as ctx:
            assert client.get("/overview/").status_code == 200
        return len(ctx.captured_queries)

    stuck_saga(world["shop"], "s-0")
    small = queries()
    for n in range(6):
        stuck_saga(world["shop"], f"s-{n + 1}")
        completed_saga(world["shop"], f"c-{n}")
    assert queries() == small


def test_throughput_counts_ended_sagas_in_their_bucket_by_outcome(world: dict[str, Any]) -> None:
    shop = world["shop"]
    stuck_saga(shop, "stuck")
    completed_saga(shop, "ok")
    completed_saga(shop, "old")
    completed_saga(world["other"], "not-mine")
    now = datetime(2026, 11, 29, 12, 2, tzinfo=UTC)
    # Bucketed by the server's clock (changed_at); the times the agents reported say otherwise.
    Saga.objects.filter(saga_id__in=["stuck", "ok", "not-mine"]).update(
        changed_at=now - timedelta(minutes=1), updated_at=datetime(1970, 1, 1, tzinfo=UTC)
    )
    Saga.objects.filter(saga_id="old").update(
        changed_at=now - timedelta(minutes=40), updated_at=now - timedelta(minutes=1)
    )
    hour = overview._throughput([shop.pk], "hour", now)
    assert len(hour) == 12 and hour[-1].start == datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    assert hour[-1].by_status == {"ROLLBACK_FAILED": 1, "COMPLETED": 1}
    assert hour[-9].by_status == {"COMPLETED": 1}  # 11:20-11:25
    day = overview._throughput([shop.pk], "day", now)
    assert len(day) == 24 and sum(b.total for b in day) == 3
    assert day[-1].total == 2 and day[-2].total == 1


def test_anonymous_users_are_sent_to_log_in_from_the_overview(client: Client) -> None:
    response = client.get("/overview/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_saga_list_filters_by_time_range(world: dict[str, Any]) -> None:
    completed_saga(world["shop"], "fresh")
    completed_saga(world["shop"], "stale")
    Saga.objects.filter(saga_id="stale").update(changed_at=datetime.now(UTC) - timedelta(hours=3))
    recent = world["client"].get("/?since=1h").content.decode()
    assert "fresh" in recent and "stale" not in recent
    assert "stale" in world["client"].get("/?since=24h").content.decode()
    bogus = world["client"].get("/?since=bogus")
    assert bogus.status_code == 400 and "since: unknown value" in bogus.content.decode()


def test_needs_attention_lists_every_waiting_state_oldest_first(world: dict[str, Any]) -> None:
    shop = world["shop"]
    for n in range(4):
        stuck_saga(shop, f"s-{n}")
    stuck_saga(world["other"], "theirs")
    failed = list(Step.objects.filter(saga__project=shop, state="ROLLBACK_FAILED").order_by("pk"))
    now = datetime.now(UTC)
    for step, state, hours_ago in zip(
        failed,
        ["IN_DOUBT", "ROLLBACK_FAILED", "AWAITING_APPROVAL", "ROLLBACK_FAILED"],
        [2, 4, 3, 1],
        strict=True,
    ):
        Step.objects.filter(pk=step.pk).update(  # the agent's times say the opposite
            state=state,
            changed_at=now - timedelta(hours=hours_ago),
            updated_at=now + timedelta(hours=hours_ago),
        )
    listed = overview.steps_needing_attention([shop], limit=3)
    assert [s.pk for s in listed] == [failed[1].pk, failed[2].pk, failed[0].pk]

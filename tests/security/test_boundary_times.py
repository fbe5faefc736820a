"""Property: every time the server accepts from an agent can be shown everywhere it appears.

An agent's times are shown, never trusted (the server's own clock orders the lists): a
clock at the first or the last instant the API takes (years 0001 and 9999 in UTC, any
offset up to ±23:59, microseconds) must still open every page that shows the saga. The
StoreBot run, paused at an approval or halted on a failed undo, is posted with its every
time rewritten to boundary times drawn below; each answer is 200, or a 422 naming the
field whose time is past UTC's range (and only then). After it the saga page and its
timeline, the list and its search, the overview and its charts, the tools pages, the
audit log, the approval queue, the needs-attention page, both exports, the API's reads
and the live feed's fragments all answer.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import event as count_as
from hypothesis import strategies as st

from sagaboard.access.reads import visible
from sagaboard.access.services.tokens import token_create
from sagaboard.health.services import tool_rollup
from sagaboard.live import fragments
from sagaboard.models import Project, Saga
from tests.support.agent_runs import paused_storebot_events, post_events
from tests.support.hitl import person

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("record_verified")]

FIRST = datetime(1, 1, 1, tzinfo=UTC)
LAST = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
TIME_FIELDS = ("created_at", "updated_at", "completed_at", "started_at", "finished_at", "at")
EXTREME_OFFSETS = [-(23 * 60 + 59), 23 * 60 + 59, -1, 1, 0]


@st.composite
def wall_times(draw: Any) -> str:
    """An RFC 3339 time near year 1's start or year 9999's end, as a clock would write it:
    any offset, 0 to 9 digits of fraction (pydantic keeps six)."""
    near_last = draw(st.booleans())
    away = timedelta(
        seconds=draw(st.sampled_from([0, 0, 1, 59, 3600, 86399, 86400 * 2])),
        microseconds=draw(st.sampled_from([0, 1, 999999, 500000])),
    )
    wall = (LAST - away) if near_last else (FIRST + away)
    minutes = draw(st.sampled_from(EXTREME_OFFSETS) | st.integers(-(24 * 60 - 1), 24 * 60 - 1))
    digits = draw(st.sampled_from([0, 3, 6, 9]))
    text = f"{wall.year:04d}-" + wall.strftime("%m-%dT%H:%M:%S")  # %Y: "1" on glibc
    if digits:
        text += "." + f"{wall.microsecond:06d}{draw(st.sampled_from(['000', '999']))}"[:digits]
    if minutes == 0 and draw(st.booleans()):
        return text + draw(st.sampled_from(["Z", "z"]))
    sign = "+" if minutes >= 0 else "-"
    return text + f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def in_utc(value: str) -> datetime | None:
    """``value`` (an RFC 3339 time) in UTC, to the microsecond as the API keeps it; None
    when that is outside years 1..9999."""
    try:
        return datetime.fromisoformat(value.upper()).astimezone(UTC)
    except OverflowError:
        return None


def shown(at: datetime) -> tuple[str, str]:
    """What a page writes for ``at``: its ``<time datetime>`` and its exact UTC text."""
    iso = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return f'datetime="{iso}"', f"{iso[:10]} {iso[11:19]} UTC"


def rewritten(events: list[dict[str, Any]], times: list[str]) -> list[tuple[str, str]]:
    """Every time in ``events`` swapped for one of ``times`` (each distinct time the SDK
    wrote for the next drawn one in turn, so a time that must not change stays one);
    returns (field, value) in the order the server checks them (``events[i].part.name``)."""
    cycle, swap = itertools.cycle(times), {}
    order: list[tuple[str, str]] = []

    def set_in(obj: dict[str, Any], where: str) -> None:
        for name in TIME_FIELDS:
            if obj.get(name) is not None:
                obj[name] = swap.setdefault(obj[name], next(cycle))
                order.append((f"{where}.{name}", obj[name]))

    for i, change in enumerate(events):
        set_in(change["saga"], f"events[{i}].saga")
        if change.get("step"):
            set_in(change["step"], f"events[{i}].step")
            for n, attempt in enumerate(change["step"]["attempts"]):
                set_in(attempt, f"events[{i}].step.attempts[{n}]")
        set_in(change["event"], f"events[{i}].event")
    return order


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def world(shop: Project) -> dict[str, Any]:
    admin = Client()
    admin.force_login(person("admin-1", "admin", shop))
    return {"api": Client(), "token": token_create(project=shop, label="agent").secret,
            "admin": admin, "n": itertools.count()}  # fmt: skip


def answered(client: Client, url: str, **params: Any) -> Any:
    response = client.get(url, params)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert response.status_code == 200, (url, params, body[:2000])
    return body


def shown_everywhere(
    world: dict[str, Any], shop: Project, saga: Saga, began: datetime, first_at: datetime
) -> None:
    """Every page, export, API read and live fragment that shows ``saga`` answers; the
    pages show when it began as the agent sent it, the API its first event's time."""
    admin, path = world["admin"], f"/sagas/shop/{saga.saga_id}/"
    tool_rollup.rollup_fold()  # the tools pages' charts count the steps' runs
    page = answered(admin, path).decode()
    assert 'class="timeline-chart"' in page
    assert all(text in page for text in shown(began)), shown(began)
    answered(admin, f"{path}steps/step-1/payloads.html")  # its undo attempts
    assert shown(began)[0] in answered(admin, "/").decode()
    answered(admin, "/", q="storebot", sort="duration", order="asc")
    answered(admin, "/overview/")
    answered(admin, "/tools/")
    answered(admin, "/tools/return_item/")
    answered(admin, "/audit/")
    answered(admin, "/approvals/")
    answered(admin, "/attention/")
    answered(admin, "/inbox/")
    answered(admin, "/sagas/export.csv")
    exported = answered(admin, "/sagas/export.jsonl", steps="1")
    assert all(json.loads(line) for line in exported.splitlines())
    headers = {"Authorization": f"Bearer {world['token']}"}
    for url in (f"/api/v1/sagas/{saga.saga_id}", f"/api/v1/sagas/{saga.saga_id}/events"):
        response = world["api"].get(url, headers=headers)
        assert response.status_code == 200, (url, response.content[:2000])
    assert datetime.fromisoformat(response.json()["items"][0]["at"]) == first_at
    assert fragments.saga_detail(saga.pk, 1)
    assert fragments.saga_row(visible.saga_row(saga.pk), 1)
    if saga.status != "ROLLBACK_FAILED":  # waiting at an approval
        assert fragments.queue_changes([shop], saga.pk, "step-2", "approval.requested")
    assert fragments.attention_body([shop])
    assert fragments.overview_live([shop.pk])


@pytest.mark.slow  # property-based: generated runs, each rendering some twenty pages (~6-10 s)
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    times=st.lists(wall_times(), min_size=1, max_size=3),
    halted=st.booleans(),
)
@example(times=["9999-12-31T23:59:59Z"], halted=False)  # issue 36: the saga page was a 500
@example(times=["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999+00:00"], halted=True)
@example(times=["9999-12-31T23:59:59.5+23:59", "0001-01-01T00:00:00.000001-23:59"], halted=False)
@example(times=["9999-12-31T23:59:59-00:01"], halted=False)  # refused: 10000-01-01 in UTC
@example(times=["0001-01-01T00:00:00.999999+00:01"], halted=True)  # refused: year 0 in UTC
def test_every_accepted_time_is_shown_on_every_page(
    world: dict[str, Any], shop: Project, times: list[str], halted: bool
) -> None:
    saga_id = f"edge-{next(world['n'])}"
    events = paused_storebot_events(saga_id, refund_approval=not halted, return_undo_fails=halted)
    order = rewritten(events, times)
    response = post_events(world["api"], world["token"], events)
    refused = next(((field, value) for field, value in order if in_utc(value) is None), None)
    count_as("refused" if refused is not None else "accepted")
    if refused is not None:
        assert response.status_code == 422, response.content
        error = response.json()["error"]
        assert error["field"] == refused[0], (error, refused)
        assert "out of range" in error["message"]
        assert not Saga.objects.filter(saga_id=saga_id).exists()
        return
    assert response.status_code == 200, response.content
    saga = Saga.objects.get(project=shop, saga_id=saga_id)
    if not halted:
        asked = world["api"].post(
            f"/api/v1/sagas/{saga_id}/steps/step-2/approval", "{}", "application/json",
            headers={"Authorization": f"Bearer {world['token']}"},
        )  # fmt: skip
        assert asked.status_code == 200, asked.content
    began, first_at = in_utc(events[0]["saga"]["created_at"]), in_utc(events[0]["event"]["at"])
    assert began is not None and first_at is not None
    assert saga.created_at == began  # to the microsecond
    shown_everywhere(world, shop, saga, began, first_at)

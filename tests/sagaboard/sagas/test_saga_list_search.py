"""The saga list page: its columns, sorts, search box and filter bar; a bad value is a 400
naming the field; the live feed only where it can keep the list true."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from sagaboard.models import Project, Saga
from tests.support.search_world import build

pytestmark = pytest.mark.django_db


def ids(page: str) -> list[str]:
    return re.findall(r'<code class="muted">([^<]+)</code></td>', page)


@pytest.fixture
def alice(client: Client) -> dict[str, Any]:
    shop = Project.objects.create(slug="shop", name="Shop")
    user = get_user_model().objects.create_user("alice", password="pw-alice-123")
    shop.members.add(user)
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    return {"client": client, "shop": shop, "sagas": build(shop)}


def get(alice: dict[str, Any], url: str) -> str:
    response = alice["client"].get(url)
    assert response.status_code == 200, response.content.decode()[:2000]
    return response.content.decode()


def test_rows_show_start_duration_steps_failing_step_and_who_ran_it(alice: dict[str, Any]) -> None:
    page = get(alice, "/?q=s-failed")
    (row,) = re.findall(r'<tr id="saga-\d+">.*?</tr>', page, re.S)
    assert "2026-03-01 14:00:00" in row  # started: received by the server
    assert "20 min" in row  # duration (stored: 2 x 10 min)
    assert "<td>2</td>" in row  # two steps
    assert "<code>step-2</code>" in row and "charge_card" in row  # the failing step, its tool
    assert "sagaboard" in row and "token storebot" in row  # run by
    assert "ROLLED_BACK" in row
    assert 'src="/static/sagaboard/durations.js"' in page


def test_a_running_saga_s_duration_ticks(alice: dict[str, Any]) -> None:
    page = get(alice, "/?q=s-refund")
    assert re.search(r'<time class="duration" data-started="2026-03-01T12:00:00.000Z">', page)
    done = get(alice, "/?q=s-failed")
    assert 'class="duration"' not in done and "duration-done" in done


def test_sorts_by_started_updated_and_duration(alice: dict[str, Any]) -> None:
    newest = ["s-nothing", "s-text17", "s-failed", "s-other", "s-refund"]
    assert ids(get(alice, "/")) == newest
    assert ids(get(alice, "/?sort=started&order=asc")) == newest[::-1]
    Saga.objects.filter(saga_id="s-other").update(duration_ms=10**9)
    assert ids(get(alice, "/?sort=duration"))[0] == "s-other"
    page = get(alice, "/?sort=started")
    assert 'aria-sort="descending"><a href="?sort=started&amp;order=asc">Started' in page
    assert 'aria-sort="none"><a href="?sort=duration&amp;order=desc">Duration' in page


def test_a_sorted_list_pages_with_its_sort(alice: dict[str, Any]) -> None:
    client = alice["client"]
    at = alice["sagas"]["refund"].created_at
    for n in range(55):
        Saga.objects.create(
            project=alice["shop"], saga_id=f"x-{n:02d}", name="bulk", status="COMPLETED",
            created_at=at, updated_at=at, duration_ms=n,
        )  # fmt: skip
    first = client.get("/?q=x-&sort=duration&order=asc").content.decode()
    link = re.search(r'class="next" href="\?([^"]+)"', first)
    assert link is not None
    second = client.get("/?" + link.group(1).replace("&amp;", "&")).content.decode()
    assert ids(first)[:2] == ["x-00", "x-01"] and ids(second) == [f"x-{n}" for n in range(50, 55)]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=NOPE", "status"),
        ("json=input.a'%20OR%201=1", "json"),
        ("q=input.__class__[", "q"),
        ("started_after=soon", "started_after"),
        ("sort=name", "sort"),
        ("q=a%00b", "q"),
        ("cursor=a%00b", "cursor"),
    ],
)
def test_a_bad_value_is_a_400_naming_the_field(
    alice: dict[str, Any], query: str, field: str
) -> None:
    response = alice["client"].get(f"/?{query}")
    assert response.status_code == 400
    assert f'<p class="message error" role="alert">{field}: ' in response.content.decode()


def test_a_filter_at_year_1_or_9999_is_kept_with_its_four_digit_year(alice: dict[str, Any]) -> None:
    # %Y writes year 1 as "1" on glibc: the form and every link (next page, sorts, export)
    # carried "1-01-01T00:00:00", which the next request refused (400).
    page = get(alice, "/?started_after=0001-01-01T00:00&updated_before=9999-12-31T23:59:59")
    assert 'value="0001-01-01T00:00:00"' in page and 'value="9999-12-31T23:59:59"' in page
    assert "started_after=1-" not in page
    links = set(re.findall(r'href="(/[^"]*started_after=[^"]*)"', page))
    assert links and all("started_after=0001-01-01T00%3A00%3A00" in link for link in links)
    for link in links:  # the sorts, the quick ranges, the exports
        response = alice["client"].get(link.replace("&amp;", "&"))
        assert response.status_code == 200, link


def test_the_search_box_and_filter_bar_find(alice: dict[str, Any]) -> None:
    assert ids(get(alice, "/?q=input.orderId+%3D+%22o-17%22")) == ["s-refund"]
    assert ids(get(alice, "/?q=error:acme")) == ["s-failed"]
    assert ids(get(alice, "/?error=timeout&tool=charge_card&actor=storebot")) == ["s-failed"]
    page = get(alice, "/?json=output.refund.id&since=7d")
    assert ids(page) == [] and "No sagas match." in page
    page = get(alice, "/?json=output.refund.id")
    assert ids(page) == ["s-refund"]
    assert 'name="json" value="output.refund.id"' in page  # the form shows what was asked


def test_user_text_in_filters_is_escaped(alice: dict[str, Any]) -> None:
    page = get(alice, "/?error=%3Cscript%3Ealert(1)%3C/script%3E&tool=%22%3E%3Cimg")
    assert "<script>alert" not in page and '"><img' not in page
    assert "&lt;script&gt;" in page


def test_the_live_feed_is_on_only_where_it_keeps_the_list_true(alice: dict[str, Any]) -> None:
    def live_rows(page: str) -> bool:
        return re.search(r'ws-connect="/ws/sagas/\?[^"]*list=1', page) is not None

    assert live_rows(get(alice, "/?status=ROLLED_BACK&tool=charge_card"))
    assert live_rows(get(alice, "/?status=WAITING"))
    for query in ("sort=started", "error=timeout", "json=output.refund", "actor=storebot"):
        page = get(alice, f"/?{query}")
        assert not live_rows(page) and "Live updates are off" in page, query
        # The rows stay still; the navigation's badges still hear of changes.
        assert 'ws-connect="/ws/sagas/?badges=1"' in page, query


def test_a_project_not_mine_shows_nothing(alice: dict[str, Any]) -> None:
    theirs = Project.objects.create(slug="theirs", name="Theirs")
    build(theirs)
    assert ids(get(alice, "/?project=theirs")) == []
    assert len(ids(get(alice, "/"))) == 5


def test_the_box_keeps_what_was_typed_and_the_bar_its_own(alice: dict[str, Any]) -> None:
    page = get(alice, "/?q=input.orderId+%3D+%22o-17%22&tool=refund_payment")
    assert 'name="q" value="input.orderId = &quot;o-17&quot;"' in page
    assert 'name="json" value=""' in page and 'name="tool" value="refund_payment"' in page
    assert ids(page) == ["s-refund"]
    response = alice["client"].get("/?q=tool:a&tool=b")
    assert (
        response.status_code == 400
        and "q: tool is also in the filter bar" in response.content.decode()
    )

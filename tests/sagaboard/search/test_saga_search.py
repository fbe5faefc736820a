"""saga_search: each filter finds exactly its sagas (on SQLite and PostgreSQL), bad values
name their field, hostile JSON paths are refused, and keyset pages never skip or repeat."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.http import QueryDict

from sagaboard.access.reads import visible
from sagaboard.models import Project, Saga
from sagaboard.search.reads import saga_search
from tests.support.search_world import T0, build

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> dict[str, Any]:
    shop = Project.objects.create(slug="shop", name="Shop")
    other = Project.objects.create(slug="other", name="Other")
    sagas = build(shop)
    build_other = build(other)  # the same data in a project the searcher cannot see
    return {"shop": shop, "other": other, "sagas": sagas, "theirs": build_other}


def found(world: dict[str, Any], query: str) -> set[str]:
    search = saga_search.parse(QueryDict(query))
    rows = saga_search.select(search, [world["shop"]])
    return {world_key(world, saga) for saga in rows}


def world_key(world: dict[str, Any], saga: Saga) -> str:
    assert saga.project_id == world["shop"].pk, "a saga of another project"
    return next(k for k, s in world["sagas"].items() if s.pk == saga.pk)


CASES = [
    ("", {"refund", "other", "failed", "text17", "nothing"}),
    ("q=s-re", {"refund"}),
    ("q=CHECK", {"failed"}),  # a name prefix, any case
    ("q=S-RE", set()),  # an id prefix is exact: ids are case-sensitive
    ("q=s-*", set()),  # GLOB and LIKE wildcards are text
    ("q=s-%25", set()),
    ("q=s-[r]", set()),
    ("q=s-?efund", set()),
    ("tool=refund_payment", {"refund", "other"}),
    ("q=tool:charge_card", {"failed"}),
    ("error=timeout", {"failed"}),
    ("error=gateway+acme", {"failed"}),  # every word, case-insensitive
    ("error=Ac", {"failed"}),  # a short word (no trigram): still found
    ("error=acme+nowhere", set()),
    ("q=error:TIMEOUT", {"failed"}),
    ("q=Gateway+TIMEOUT+from+Acme", {"failed"}),  # plain words search error text too
    ("q=acme", {"failed"}),  # not a name or id prefix: its step's error
    ("q=Ac+gateway", {"failed"}),  # a short word beside a long one: still every word
    ("q=gateway+nowhere", set()),  # every word, in one step's error
    ("q=check+timeout", set()),  # neither a name prefix nor in an error
    ("q=order", {"refund", "other", "text17"}),  # a name prefix (no error has "order")
    ("q=s-", {"refund", "other", "failed", "text17", "nothing"}),  # short: names and ids only
    ("q=Ac", set()),  # too short for error text: a name or id prefix only
    ("error=100%25", set()),  # LIKE wildcards are text
    ("error=_", set()),
    ('json=input.orderId+%3D+"o-17"', {"refund"}),  # not o-170
    ("json=input.orderId+%3D+o-17", {"refund"}),  # a bare word is a string
    ("json=input.orderId+%3D+17", {"failed"}),  # the number, not the string "17"
    ('json=input.orderId+%3D+"17"', {"text17"}),
    ('json=input.items[0].sku+%3D+"A-1"', {"refund"}),
    ('json=input.items[1].sku+%3D+"A-1"', set()),  # that index exactly
    ('json=input.items[1].sku+%3D+"B-2"', {"refund"}),
    ("json=input.items[1]", {"refund"}),
    ("json=input.items[2]", set()),
    ("json=output.refund.id", {"refund"}),  # has the path
    ("json=output.refund", {"refund", "other"}),
    ("json=output.ok+%3D+false", {"nothing"}),
    ("json=input.note+%3D+null", {"nothing"}),
    ("json=output.held+%3D+true", {"failed"}),
    ('json=input.to+%3D+"ü@example.com"', {"nothing"}),
    ("q=output.refund.id", {"refund"}),  # the search box takes a JSON path too
    ('json=input.orderId+%3D+"o-17"&json=output.refund', {"refund"}),  # AND
    ("status=ROLLED_BACK", {"failed"}),
    (
        "status=IN_PROGRESS&status=ROLLED_BACK",
        {"refund", "other", "failed", "text17", "nothing"},
    ),
    ("actor=storebot", {"refund", "failed"}),
    ("q=actor:storebot&tool=refund_payment", {"refund"}),
    ("started_after=2026-03-01T13:30", {"failed", "text17", "nothing"}),
    ("started_after=2026-03-01T13:30&started_before=2026-03-01T15:30", {"failed", "text17"}),
    ("updated_before=2026-03-01T12:15", {"refund"}),
    (  # 13:00 UTC
        "updated_after=2026-03-01T14:00%2B01:00",
        {"other", "failed", "text17", "nothing"},
    ),
    ("project=other", set()),  # not the searcher's project: nothing, not theirs
]


@pytest.mark.parametrize(("query", "expected"), CASES)
def test_each_filter_finds_exactly_its_sagas(
    world: dict[str, Any], query: str, expected: set[str]
) -> None:
    assert found(world, query) == expected


@pytest.mark.parametrize("query", [query for query, _ in CASES])
def test_the_walk_finds_what_the_sorted_matches_do(
    world: dict[str, Any], query: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite picks a plan by counting matches (``PROBE``): with none allowed, every
    prefix and step search walks the sort's index, and must find the same, in order."""
    search = saga_search.parse(QueryDict(query))
    listed = [s.pk for s in saga_search.select(search, [world["shop"]])]
    monkeypatch.setattr(saga_search, "PROBE", 0)
    assert [s.pk for s in saga_search.select(search, [world["shop"]])] == listed


def test_with_exceptions_and_waiting_are_statuses(world: dict[str, Any]) -> None:
    sagas = world["sagas"]
    Saga.objects.filter(pk=sagas["failed"].pk).update(outcome="WITH_EXCEPTIONS")
    Saga.objects.filter(pk=sagas["other"].pk).update(waiting_for="APPROVAL")
    assert found(world, "status=with_exceptions") == {"failed"}
    assert found(world, "status=WAITING") == {"other"}
    assert found(world, "status=WAITING&status=WITH_EXCEPTIONS") == {"failed", "other"}
    assert found(world, "waiting=1&tool=refund_payment") == {"other"}
    assert found(world, "outcome=WITH_EXCEPTIONS") == {"failed"}


def test_the_quick_ranges_go_by_the_server_clock(world: dict[str, Any]) -> None:
    assert found(world, "since=7d") == set()  # every saga changed in March
    Saga.objects.filter(pk=world["sagas"]["text17"].pk).update(
        changed_at=saga_search.timezone.now() - timedelta(minutes=5)
    )
    assert found(world, "since=1h") == {"text17"}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=DONE", "status"),
        ("outcome=MAYBE", "outcome"),
        ("sort=name", "sort"),
        ("since=2h", "since"),
        ("waiting=yes", "waiting"),
        ("order=sideways", "order"),
        ("started_after=yesterday", "started_after"),
        ("updated_before=2026-13-01T00:00", "updated_before"),
        ("started_after=2026-03-02T00:00&started_before=2026-03-01T00:00", "started_before"),
        ("json=input", "json"),
        ("json=orderId+%3D+1", "json"),
        ("json=input.orderId+%3D+{}", "json"),
        ("json=input.orderId+%3D+[1]", "json"),
        ('json=input.orderId+%3D+"unterminated', "json"),
        ("json=input.orderId+%3D+1e999", "json"),
        ("q=input.$where", "q"),
        ("tool=a%00b", "tool"),
        ("error=" + "x" * 201, "error"),
    ],
)
def test_a_bad_value_names_its_field(query: str, field: str) -> None:
    with pytest.raises(saga_search.SearchError) as caught:
        saga_search.parse(QueryDict(query))
    assert caught.value.field == field and str(caught.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    "path",
    [
        "input.a'); DROP TABLE sagaboard_saga; --",
        'input."a"',
        "input.a..b",
        "input.a[-1]",
        "input.a[1234567]",
        "input.a.b[0]$",
        "input.*",
        "input.a[*]",
        "input.a__contains",
        "input.a\\u0000",
        "input.a b",
        "input.a = 1 OR 1=1 --'",
        "input" + ".a" * 11,
        "input.ключ",
        "input.a[0x1]",
        "input.@.a",
        "input.a = 1; output.b",
    ],
)
def test_hostile_json_paths_are_refused(path: str) -> None:
    query = QueryDict(mutable=True)
    query["json"] = path
    try:
        search = saga_search.parse(query)
    except saga_search.SearchError as err:
        assert err.field == "json"
        return
    # What parses is allow-listed segments and a bound value: never SQL, never a lookup.
    (condition,) = search.json
    assert all(
        isinstance(s, int) or s.replace("_", "a").replace("-", "a").isalnum()
        for s in condition.path
    )
    assert "__" in path or "OR 1=1" in path or "; output" in path


def test_a_parsed_filter_round_trips_through_its_query_string() -> None:
    query = QueryDict(
        'q=chec&tool=t&error=time+out&json=input.a[0].b+%3D+"x"&json=output.c&actor=bot'
        "&status=FAILED&status=WAITING&outcome=CLEAN&waiting=1&since=24h"
        "&started_after=2026-03-01T10:00&updated_before=2026-03-02T10:00:05&sort=duration&order=asc"
    )
    search = saga_search.parse(query)
    again = saga_search.parse(search.to_query())
    assert again == search and again.json[0].path == ("a", 0, "b") and again.json[0].value == "x"


# ------------------------------------------------------------------ keyset pages


@pytest.fixture
def tied(world: dict[str, Any]) -> Project:
    """Thirteen sagas whose sort values tie in threes (ids break the ties)."""
    shop = world["shop"]
    for n in range(8):
        saga = Saga.objects.create(
            project=shop, saga_id=f"tie-{n}", name="tie", status="COMPLETED",
            created_at=T0, updated_at=T0,
        )  # fmt: skip
        Saga.objects.filter(pk=saga.pk).update(
            received_at=T0 + timedelta(hours=n // 3),
            changed_at=T0 + timedelta(minutes=n // 3),
            duration_ms=(n // 3) * 1000,
        )
    return shop


@pytest.mark.parametrize("sort", list(saga_search.SORTS))
@pytest.mark.parametrize("order", list(saga_search.ORDERS))
def test_keyset_pages_by_each_sort_neither_skip_nor_repeat(
    tied: Project, sort: str, order: str
) -> None:
    search = saga_search.SagaFilter(sort=sort, order=order)
    column = saga_search.SORTS[sort]
    sign = "-" if order == "desc" else ""
    expected = list(
        Saga.objects.filter(project=tied)
        .order_by(f"{sign}{column}", f"{sign}id")
        .values_list("pk", flat=True)
    )
    seen: list[int] = []
    cursor = None
    for _ in range(20):
        rows, cursor = visible.saga_list(projects=[tied], search=search, cursor=cursor, limit=2)
        seen += [r.pk for r in rows]
        if cursor is None:
            break
    assert seen == expected and len(expected) == 13


def test_a_cursor_of_another_sort_or_a_forged_one_is_refused(tied: Project) -> None:
    by_started = saga_search.SagaFilter(sort="started")
    _, cursor = visible.saga_list(projects=[tied], search=by_started, limit=2)
    assert cursor is not None
    with pytest.raises(visible.BadCursor):
        visible.saga_list(projects=[tied], search=saga_search.SagaFilter(), cursor=cursor)
    for forged in ("bm9wZQ", "WyJ4IiwgMV0", "WzEsIC0xLCAiZHVyYXRpb24iLCAiZGVzYyJd"):
        with pytest.raises(visible.BadCursor):
            visible.saga_list(
                projects=[tied], search=saga_search.SagaFilter(sort="duration"), cursor=forged
            )


def test_rows_carry_step_count_failed_tool_and_token(world: dict[str, Any]) -> None:
    rows, _ = visible.saga_list(projects=[world["shop"]], search=saga_search.SagaFilter())
    by_id = {r.saga_id: r for r in rows}
    failed = by_id["s-failed"]
    assert (failed.step_count, failed.failed_tool, failed.token_label) == (
        2,
        "charge_card",
        "storebot",
    )
    assert (
        by_id["s-other"].step_count,
        by_id["s-other"].failed_tool,
        by_id["s-other"].token_label,
    ) == (1, None, None)


def test_the_live_filter_agrees_with_the_list(world: dict[str, Any]) -> None:
    """What ``live_params`` hands the live feed, ``saga_matches`` decides as the list does."""
    shop = world["shop"]
    for query in (
        "",
        "status=ROLLED_BACK",
        "tool=refund_payment",
        "q=s-",
        "q=check",
        "q=gateway+acme",
        "q=Ac+timeout",
        "q=Ac",
        "q=acme+nowhere",
        "status=WAITING",
    ):
        search = saga_search.parse(QueryDict(query))
        params = search.live_params()
        assert params is not None
        listed = {s.pk for s in saga_search.select(search, [shop])}
        for saga in Saga.objects.filter(project=shop).select_related("project"):
            tools = frozenset(saga.steps.values_list("tool_name", flat=True))
            errors = frozenset(e for e in saga.steps.values_list("error", flat=True) if e)
            matches = visible.saga_matches(saga, tools, errors=errors, **params)
            assert matches == (saga.pk in listed), (query, saga)
    for query in (
        "error=x",
        "json=output.a",
        "actor=a",
        "sort=started",
        "started_after=2026-01-01T00:00",
    ):
        assert saga_search.parse(QueryDict(query)).live_params() is None


def test_json_written_compactly_is_found_too(world: dict[str, Any]) -> None:
    """Ingestion writes JSON with orjson (no spaces), the ORM with json.dumps (spaces)."""
    from django.db import connection

    step = world["sagas"]["text17"].steps.get()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE sagaboard_step SET input = %s WHERE id = %s",
            ['{"orderId":42,"ok":true,"tag":null,"name":"x-1"}', step.pk],
        )
    assert found(world, "json=input.orderId+%3D+42") == {"text17"}
    assert found(world, "json=input.ok+%3D+true") == {"text17"}
    assert found(world, "json=input.tag+%3D+null") == {"text17"}
    assert found(world, 'json=input.name+%3D+"x-1"') == {"text17"}

"""The search indexes (migration 0013_search_list_and_search): made, used, in step with steps.

SQLite keeps an FTS5 external-content table by triggers (the delete and update triggers
send FTS5's 'delete' command with the old values); PostgreSQL has GIN indexes over the
steps' inputs, outputs (jsonb) and errors (pg_trgm). Retention deletes sagas: what it
deletes must leave the index, and what an update changes must be found by its new text.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.http import QueryDict
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sagaboard.health.services.retention import retention_run
from sagaboard.models import Project, Saga, Step
from sagaboard.search.reads import saga_search
from tests.support.search_world import build

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    shop = Project.objects.create(slug="shop", name="Shop")
    build(shop)
    return shop


def found(shop: Project, query: str) -> set[str]:
    search = saga_search.parse(QueryDict(query))
    return set(saga_search.select(search, [shop]).values_list("saga_id", flat=True))


def fts_check() -> None:
    """FTS5's own check that the index holds exactly the content table's rows."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO sagaboard_step_search(sagaboard_step_search, rank) "
                "VALUES ('integrity-check', 1)"
            )


def test_the_indexes_exist() -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE name LIKE 'sagaboard_step_search%'"
            )
            names = {row[0] for row in cursor.fetchall()}
            assert {
                "sagaboard_step_search",
                "sagaboard_step_search_insert",
                "sagaboard_step_search_update",
                "sagaboard_step_search_delete",
            } <= names
        else:
            cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'sagaboard_step'")
            names = {row[0] for row in cursor.fetchall()}
            assert {"step_input_json", "step_output_json", "step_error_trgm"} <= names


def test_an_updated_error_or_output_is_found_by_its_new_text_only(shop: Project) -> None:
    step = Step.objects.get(saga__saga_id="s-failed", step_id="step-2")
    assert found(shop, "error=timeout") == {"s-failed"}
    step.error = "card declined by issuer"
    step.save()
    fts_check()
    assert found(shop, "error=timeout") == set()
    assert found(shop, "error=declined") == {"s-failed"}
    Step.objects.filter(saga__saga_id="s-other").update(output={"refund": {"id": "re_9"}})
    fts_check()
    assert found(shop, "json=output.refund.id") == {"s-refund", "s-other"}
    assert found(shop, "json=output.refund.status") == set()
    Step.objects.filter(pk=step.pk).update(error=None)
    fts_check()
    assert found(shop, "error=declined") == set()


def test_deleted_sagas_leave_the_index(shop: Project) -> None:
    """Retention deletes finished sagas (and their steps): the index forgets them."""
    old = timezone.now() - timedelta(days=400)
    Saga.objects.filter(saga_id="s-failed").update(changed_at=old)
    report = retention_run(older_than=timedelta(days=30))
    assert report.counts()["sagas"] == 1 and not Saga.objects.filter(saga_id="s-failed").exists()
    fts_check()
    assert found(shop, "error=timeout") == set()
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM sagaboard_step_search WHERE sagaboard_step_search MATCH ?",
                ['error : "timeout"'],
            )
            assert cursor.fetchone()[0] == 0
    Saga.objects.filter(saga_id="s-refund").delete()
    fts_check()
    assert found(shop, 'json=input.orderId = "o-17"') == set()
    assert found(shop, "json=input.orderId = o-170") == {"s-other"}


def test_fts_syntax_in_a_search_is_text(shop: Project) -> None:
    for hostile in ('"', 'a" OR "b', "error : x", "NEAR(a b)", "*", "^", "a AND", "(", "'; --"):
        query = QueryDict(mutable=True)
        query["error"] = hostile
        assert found(shop, query.urlencode()) == set()
        query = QueryDict(mutable=True)
        query["json"] = f"input.orderId = {hostile}"
        try:
            assert found(shop, query.urlencode()) == set()
        except saga_search.SearchError as err:
            assert err.field == "json"


def plan(sql: str, params: list[Any] | None) -> str:
    """The plan of the step search a filter makes (on PostgreSQL with sequential scans
    priced out: tiny test tables would be read whole otherwise)."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


@pytest.mark.parametrize(
    ("query", "sqlite_index", "postgres_index"),
    [
        ("error=timeout", "sagaboard_step_search", "step_error_trgm"),
        ('json=input.orderId = "o-17"', "sagaboard_step_search", "step_input_json"),
        ("json=output.refund.id", "sagaboard_step_search", "step_output_json"),
    ],
)
def test_searches_use_their_index(
    shop: Project, query: str, sqlite_index: str, postgres_index: str
) -> None:
    search = saga_search.parse(QueryDict(query))
    where, params = (
        saga_search._error_sql(search.error)
        if search.error
        else saga_search._json_sql(search.json[0])
    )
    steps = f"SELECT sagaboard_step.saga_id FROM sagaboard_step WHERE {' AND '.join(where)}"
    explained = plan(steps, list(params))
    wanted = sqlite_index if connection.vendor == "sqlite" else postgres_index
    assert wanted in explained, explained


@pytest.mark.slow  # fills the tables the plans are read on
def test_a_prefix_probe_reads_its_indexes(shop: Project) -> None:
    """The count that picks a prefix search's plan (``saga_search.PROBE``) reads the name and
    id prefix indexes (0014), not the project's every saga (among 5,000: a planner reads a
    tiny table whole whatever its indexes)."""
    now = timezone.now()
    Saga.objects.bulk_create(
        Saga(project=shop, saga_id=f"bulk-{n:05d}", name=f"order {n}", status="COMPLETED",
             created_at=now, updated_at=now)
        for n in range(5000)
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE sagaboard_saga")
    with CaptureQueriesContext(connection) as queries:
        found(shop, "q=s-re")
    probe = next(q["sql"] for q in queries.captured_queries if "LIMIT 1001" in q["sql"])
    explained = plan(probe, None)
    wanted = (
        ["saga_project_name_nocase", "sqlite_autoindex_sagaboard_saga"]
        if connection.vendor == "sqlite"
        else ["saga_project_name_prefix", "saga_project_id_prefix"]
    )
    assert all(name in explained for name in wanted), explained

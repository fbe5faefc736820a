"""Exporting the sagas a list filter selects: CSV and JSON Lines, streamed, scoped, audited."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.http import StreamingHttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext

from sagaboard.models import AuditEntry, Project
from sagaboard.sagas.pages.export_pages import csv_cell
from sagaboard.search.reads import export
from tests.support.saga_rows import StepSpec, make_saga

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(client: Client) -> tuple[Client, Project]:
    shop = Project.objects.create(slug="shop", name="Shop")
    user = get_user_model().objects.create_user("alice", password="pw-alice-123")
    shop.members.add(user)
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    return client, shop


def body(response: StreamingHttpResponse) -> str:
    return b"".join(response.streaming_content).decode()


def test_csv_has_a_row_per_saga_newest_first(alice: tuple[Client, Project]) -> None:
    client, shop = alice
    make_saga(shop, "s-1", [StepSpec("charge"), StepSpec("label", "FAILED")], status="ROLLED_BACK",
              failed_step="step-2")  # fmt: skip
    make_saga(shop, "s-2", [StepSpec("charge")])
    response = client.get("/sagas/export.csv")
    assert isinstance(response, StreamingHttpResponse) and response.status_code == 200
    disposition = response["Content-Disposition"]
    assert disposition.startswith('attachment; filename="sagaboard-sagas-all-')
    assert disposition.endswith('.csv"')
    rows = list(csv.DictReader(io.StringIO(body(response))))
    assert [r["id"] for r in rows] == ["s-2", "s-1"]
    assert rows[1]["status"] == "ROLLED_BACK" and rows[1]["step_count"] == "2"
    assert rows[1]["failed_step"] == "step-2" and rows[1]["failed_tool"] == "label"
    assert rows[0]["duration_seconds"] == "1.0" and rows[0]["project"] == "shop"


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_formula_cells_are_quoted(alice: tuple[Client, Project], start: str) -> None:
    client, shop = alice
    make_saga(shop, f"{start}x", [StepSpec("t")], name=f'{start}HYPERLINK("http://evil")')
    rows = list(csv.reader(io.StringIO(body(client.get("/sagas/export.csv")))))
    assert rows[1][0] == f"'{start}x" and rows[1][1].startswith(f"'{start}HYPERLINK")
    assert csv_cell("plain") == "plain" and csv_cell(None) == ""


def test_jsonl_with_steps(alice: tuple[Client, Project]) -> None:
    client, shop = alice
    make_saga(shop, "s-1", [StepSpec("charge"), StepSpec("label")])
    response = client.get("/sagas/export.jsonl?steps=1")
    assert response["Content-Type"].startswith("application/jsonl")
    lines = [json.loads(line) for line in body(response).splitlines()]
    assert [line["type"] for line in lines] == ["saga", "step", "step"]
    assert lines[0]["id"] == "s-1" and lines[0]["step_count"] == 2
    assert [line["tool_name"] for line in lines[1:]] == ["charge", "label"]
    plain = [json.loads(x) for x in body(client.get("/sagas/export.jsonl")).splitlines()]
    assert [line["type"] for line in plain] == ["saga"]


def test_the_list_filter_applies(alice: tuple[Client, Project]) -> None:
    client, shop = alice
    make_saga(shop, "done", [StepSpec("charge")])
    make_saga(shop, "failed", [StepSpec("label", "FAILED")], status="FAILED")
    got = body(client.get("/sagas/export.jsonl?status=FAILED&project=shop&since=24h"))
    assert [json.loads(x)["id"] for x in got.splitlines()] == ["failed"]
    got = body(client.get("/sagas/export.jsonl?tool=charge"))
    assert [json.loads(x)["id"] for x in got.splitlines()] == ["done"]
    got = body(client.get("/sagas/export.jsonl?q=fa"))
    assert [json.loads(x)["id"] for x in got.splitlines()] == ["failed"]


def test_only_the_users_projects_are_exported(alice: tuple[Client, Project]) -> None:
    client, shop = alice
    other = Project.objects.create(slug="other", name="Other")
    make_saga(shop, "mine", [StepSpec("t")])
    make_saga(other, "theirs", [StepSpec("t")])
    got = body(client.get("/sagas/export.csv"))
    assert "mine" in got and "theirs" not in got
    assert client.get("/sagas/export.csv?project=other").status_code == 400


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=NOPE", "status: unknown value &#x27;NOPE&#x27;"),
        ("outcome=MAYBE", "outcome: unknown value &#x27;MAYBE&#x27;"),
        ("since=1y", "since: unknown value &#x27;1y&#x27;; one of 1h, 24h, 7d"),
        ("waiting=yes", "waiting: unknown value"),
        ("q=a%00", "q: holds NUL"),
        ("tool=" + "x" * 201, "tool: longer than 200 characters"),
        ("project=nope", "project: not one of your projects"),
        ("steps=2", "steps: must be 1 or 0"),
    ],
)
def test_bad_filter_values_are_a_400_naming_the_field(
    alice: tuple[Client, Project], query: str, message: str
) -> None:
    client, _ = alice
    for url in ("/sagas/export.csv", "/sagas/export.jsonl"):
        response = client.get(f"{url}?{query}")
        assert response.status_code == 400 and message in response.content.decode()
    assert not AuditEntry.objects.filter(action="sagas.export").exists()


def test_a_large_export_reads_in_chunks_not_rows(
    alice: tuple[Client, Project], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, shop = alice
    monkeypatch.setattr(export, "CHUNK", 10)
    for n in range(45):
        make_saga(shop, f"s-{n:03d}", [StepSpec("t"), StepSpec("u", "FAILED")],
                  failed_step="step-2")  # fmt: skip
    for url, per_chunk in (("/sagas/export.csv", 3), ("/sagas/export.jsonl?steps=1", 2)):
        with CaptureQueriesContext(connection) as ctx:
            got = body(client.get(url))
        chunks = 5  # 45 sagas, 10 a chunk
        setup = 8  # session, user, projects, audit entry
        assert len(ctx.captured_queries) <= setup + chunks * per_chunk + 1
        assert len(ctx.captured_queries) < 45
        assert got.count("s-0") == (45 if "csv" in url else 45 * 3)


def test_each_export_is_audited(alice: tuple[Client, Project]) -> None:
    client, _ = alice
    body(client.get("/sagas/export.jsonl?status=FAILED&steps=1"))
    entry = AuditEntry.objects.get(action="sagas.export")
    assert entry.actor == "user:alice" and entry.project.slug == "shop"
    assert entry.data == {"format": "jsonl", "filter": {"status": ["FAILED"]}, "steps": True}


def test_the_list_links_to_the_export_of_its_filter(alice: tuple[Client, Project]) -> None:
    client, _ = alice
    page = client.get("/?status=FAILED&q=ab").content.decode()
    assert 'href="/sagas/export.csv?q=ab&amp;status=FAILED"' in page  # the filter's own query
    assert "Export JSON Lines" in page


def test_an_empty_export_has_its_header(alice: tuple[Client, Project]) -> None:
    client, _ = alice
    assert body(client.get("/sagas/export.csv")).startswith("id,name,project,status")
    assert body(client.get("/sagas/export.jsonl")) == ""

"""The saga page's payloads: JSON trees with copy buttons, diffs, truncation and the raw
downloads, with hostile keys and values staying text (both databases)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.models import CompensationAttempt, Project, Step
from tests.support.hitl import login
from undo_core import Saga as EngineSaga
from undo_core import define_tool

pytestmark = pytest.mark.django_db

HOSTILE_KEY = "<script>alert('k')</script>"
HOSTILE_VALUE = "\u202eevil<img src=x onerror=alert(1)>"
INPUT = {
    "orderId": "o-17",
    "items": [{"sku": "A-1"}, {"sku": "B-2"}, {"sku": "C-3", "qty": 2}],
    HOSTILE_KEY: HOSTILE_VALUE,
    "note\u202e": None,
}
OUTPUT = {"orderId": "o-17", "refund": {"id": "r-9", "amount": 12.5}, "items": 3}


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def saga_with(project: Project, saga_id: str, value: Any, output: Any) -> Step:
    saga = EngineSaga("storebot-return", saga_id=saga_id, store=DjangoStore(project))
    saga.execute(define_tool("return_item", lambda i: output, lambda o, i: None), value)
    return Step.objects.get(saga__project=project, saga__saga_id=saga_id)


def page(client: Client, saga_id: str) -> str:
    response = client.get(f"/sagas/shop/{saga_id}/")
    assert response.status_code == 200
    return response.content.decode()


def test_hostile_keys_and_values_render_as_marked_text(shop: Project) -> None:
    saga_with(shop, "s-1", INPUT, OUTPUT)
    html = page(login("viewer", shop), "s-1")
    assert "<script>alert" not in html and "<img src=x" not in html
    key = "&lt;script&gt;alert(&#x27;k&#x27;)&lt;/script&gt;"
    assert f'<span class="jt-key">{key}</span>' in html
    marker = '<span class="invisible-char">⟨U+202E⟩</span>'
    assert f"{marker}evil&lt;img src=x onerror=alert(1)&gt;" in html  # the value's bidi override
    assert f'<span class="jt-key">note{marker}</span>' in html  # and the key's
    # In attributes the text is escaped, whole: what the button copies is what was stored.
    assert (
        'data-copy="input[&quot;&lt;script&gt;alert(&#x27;k&#x27;)&lt;/script&gt;&quot;]"' in html
    )
    assert f'data-copy="{chr(0x202E)}evil&lt;img src=x onerror=alert(1)&gt;"' in html


def test_copy_buttons_carry_each_path_and_value(shop: Project) -> None:
    saga_with(shop, "s-1", INPUT, OUTPUT)
    html = page(login("viewer", shop), "s-1")
    for path in ("input.orderId", "input.items[2].sku", "input.items[2]", "output.refund.id"):
        assert f'data-copy="{path}" data-copy-what="path"' in html, path
    assert (
        'data-copy="C-3" data-copy-what="value" aria-label="Copy the value of input.items[2].sku"'
        in html
    )
    assert 'data-copy="12.5" data-copy-what="value"' in html  # a number, as JSON
    items = "[{&quot;sku&quot;:&quot;A-1&quot;},{&quot;sku&quot;:&quot;B-2&quot;},"
    assert f'data-copy="{items}' in html  # a small container copies as compact JSON
    # Strings quoted, numbers and JSON's words bare: the types read apart.
    assert '<span class="jt-string"><span class="jt-quote">"</span>o-17' in html
    assert (
        '<span class="jt-number">12.5</span>' in html
        and '<span class="jt-null">null</span>' in html
    )


def test_the_input_output_diff_labels_each_change(shop: Project) -> None:
    saga_with(shop, "s-1", INPUT, OUTPUT)
    html = page(login("viewer", shop), "s-1")
    assert "Input → output (4 differences)" in html
    changed = re.search(r'<li class="diff-changed">.*?</li>', html, re.S)
    assert changed is not None
    text = re.sub(r"<[^>]+>", "", changed.group()).split()
    assert text[:4] == ["~", "changed", "items", "(type"] and "array → number)" in " ".join(text)
    assert (
        '<span class="diff-kind">added</span>' in html
        and '<span class="diff-kind">removed</span>' in html
    )
    assert '<code class="diff-path">refund</code>' in html


def test_a_large_value_is_truncated_with_a_link_to_the_raw_json(
    shop: Project, settings: Any
) -> None:
    settings.SAGABOARD_PAYLOAD_MAX_NODES = 10
    settings.SAGABOARD_PAYLOAD_MAX_STRING = 50
    step = saga_with(shop, "s-1", {"rows": list(range(100)), "blob": "z" * 500}, {"ok": True})
    html = page(login("viewer", shop), "s-1")
    url = f"/sagas/shop/s-1/steps/{step.step_id}/input.json"
    assert "truncated: 91 more" in html  # ten nodes drawn: "rows" and nine of its items
    assert f'<a href="{url}" download>download the raw JSON</a>' in html
    assert "Too large to show whole" in html
    client = login("viewer", shop, "viewer-2")
    assert json.loads(client.get(url).content) == {"rows": list(range(100)), "blob": "z" * 500}


def stored_text(step: Step, column: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {Step._meta.db_table} WHERE id = %s", [step.pk])
        return cursor.fetchone()[0]


def test_the_raw_download_is_the_stored_json_as_an_attachment(shop: Project) -> None:
    step = saga_with(shop, "s-1", INPUT, OUTPUT)
    client = login("viewer", shop)
    for part in ("input", "output"):
        response = client.get(f"/sagas/shop/s-1/steps/{step.step_id}/{part}.json")
        assert response.status_code == 200
        assert response["Content-Type"] == "application/json; charset=utf-8"
        assert (
            response["Content-Disposition"]
            == f'attachment; filename="s-1-{step.step_id}-{part}.json"'
        )
        assert response.content.decode() == stored_text(step, part)  # byte for byte
    assert (
        json.loads(client.get(f"/sagas/shop/s-1/steps/{step.step_id}/input.json").content) == INPUT
    )


def test_a_step_without_output_downloads_null(shop: Project) -> None:
    step = saga_with(shop, "s-1", {"a": 1}, None)
    Step.objects.filter(pk=step.pk).update(output=None)
    response = login("viewer", shop).get(f"/sagas/shop/s-1/steps/{step.step_id}/output.json")
    assert response.status_code == 200 and response.content == b"null"


def test_the_download_is_404_outside_the_users_projects(shop: Project, client: Client) -> None:
    other = Project.objects.create(slug="other", name="Other")
    theirs = saga_with(other, "s-1", {"secret": 1}, {"ok": 1})
    saga_with(shop, "s-1", {"mine": 1}, {"ok": 1})
    mine = login("viewer", shop)
    assert mine.get(f"/sagas/other/s-1/steps/{theirs.step_id}/input.json").status_code == 404
    assert mine.get(f"/sagas/shop/s-1/steps/{theirs.step_id}/secret.json").status_code == 404
    assert mine.get("/sagas/shop/s-1/steps/no-such-step/input.json").status_code == 404
    assert mine.get("/sagas/shop/s-1/steps/step%00/input.json").status_code == 404
    no_role = Client()
    no_role.force_login(_member_without_role(shop))
    assert no_role.get(f"/sagas/shop/s-1/steps/{theirs.step_id}/input.json").status_code == 404
    anonymous = client.get(f"/sagas/shop/s-1/steps/{theirs.step_id}/input.json")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")


def _member_without_role(project: Project) -> Any:
    user = get_user_model().objects.create_user("norole", password="pw-norole-123")
    project.members.add(user)
    return user


def test_ids_holding_slashes_and_steps_still_find_their_step(shop: Project) -> None:
    step = saga_with(shop, "a/steps/b", {"x": 1}, {"y": 2})
    Step.objects.filter(pk=step.pk).update(step_id="c/steps/d")
    client = login("viewer", shop)
    html = page(client, "a/steps/b")
    url = "/sagas/shop/a/steps/b/steps/c/steps/d/input.json"
    assert f'href="{url}"' in html
    assert json.loads(client.get(url).content) == {"x": 1}


def test_undo_attempts_show_finished_and_duration_and_a_diff(shop: Project) -> None:
    step = saga_with(shop, "s-1", {"a": 1}, {"b": 2})
    start = datetime(2026, 1, 31, 12, 0, 0, tzinfo=UTC)
    CompensationAttempt.objects.create(
        step=step, number=1, started_at=start, finished_at=start + timedelta(seconds=1.5),
        outcome="failed", error="FedEx 500",
    )  # fmt: skip
    CompensationAttempt.objects.create(
        step=step, number=2, started_at=start + timedelta(minutes=2),
        finished_at=start + timedelta(minutes=4, seconds=5), outcome="succeeded", actor="ann",
    )  # fmt: skip
    client = login("viewer", shop)
    html = page(client, "s-1")
    table = html[html.index('<table class="attempts stacks">') : html.index("</table>")]
    assert "<th>Finished</th><th>Duration</th>" in table
    assert "1.5 s" in table and "2 min 5 s" in table
    assert ">2026-01-31 12:00:01 UTC</time>" in table  # finished, exact UTC
    assert "Undo attempt #1 → #2" in html
    diff = html[html.index("Undo attempt #1 → #2") :]
    diff = diff[: diff.index("</ul>")]
    assert '<code class="diff-path">outcome</code>' in diff and "&quot;succeeded&quot;" in diff
    assert '<code class="diff-path">error</code>' in diff
    attempts = client.get(f"/sagas/shop/s-1/steps/{step.step_id}/attempts.json")
    assert attempts["Content-Disposition"].startswith("attachment;")
    assert [a["outcome"] for a in json.loads(attempts.content)] == ["failed", "succeeded"]
    assert json.loads(attempts.content)[1]["duration_seconds"] == 125.0


def test_a_long_sagas_page_loads_each_steps_trees_when_opened(shop: Project, settings: Any) -> None:
    settings.SAGABOARD_PAYLOAD_INLINE_STEPS = 0
    step = saga_with(shop, "s-1", INPUT, OUTPUT)
    client = login("viewer", shop)
    html = page(client, "s-1")
    url = f"/sagas/shop/s-1/steps/{step.step_id}/payloads.html"
    assert f'hx-get="{url}" hx-trigger="toggle from:closest details once"' in html
    assert f'<a href="{url}">Open the input and output as trees</a>' in html  # without JS
    assert 'class="json-tree"' not in html and "data-copy=" not in html
    fragment = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert fragment.startswith('<div class="payload-loaded">') and "<html" not in fragment
    assert 'data-copy="input.items[2].sku" data-copy-what="path"' in fragment
    assert "Input → output (4 differences)" in fragment and "<script>alert" not in fragment
    full = client.get(url).content.decode()
    assert "<html" in full and 'data-copy="output.refund.id" data-copy-what="path"' in full
    assert f'href="/sagas/shop/s-1/#step-{step.step_id}"' in full
    other = Project.objects.create(slug="other", name="Other")
    theirs = saga_with(other, "s-2", {"secret": 1}, None)
    assert client.get(f"/sagas/other/s-2/steps/{theirs.step_id}/payloads.html").status_code == 404
    assert client.get("/sagas/shop/s-1/steps/nope/payloads.html").status_code == 404


def test_a_short_sagas_page_draws_its_trees_itself(shop: Project, settings: Any) -> None:
    settings.SAGABOARD_PAYLOAD_INLINE_STEPS = 1
    saga_with(shop, "s-1", INPUT, OUTPUT)
    html = page(login("viewer", shop), "s-1")
    assert "payload-lazy" not in html and 'class="json-tree"' in html

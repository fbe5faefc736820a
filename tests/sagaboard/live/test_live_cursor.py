"""A page's live cursor is read before what the page shows.

A worker's last transition can commit while a page is being read. The page then
shows the state before it, and its websocket must still be sent that transition:
its ``after=`` cursor may not be past an event the page did not show. (Seen in CI:
a stop whose rollback failed at once stayed "COMPENSATING, a worker is rolling it
back" on the page, the cursor read after the saga already past the failure.)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client

from sagaboard.access.reads import visible
from sagaboard.actions.services import work_queues
from sagaboard.audit.services import audit
from sagaboard.models import Event, Project, Saga
from tests.support.hitl import person

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def saga(shop: Project) -> Saga:
    return Saga.objects.create(
        project=shop, saga_id="s-1", name="order", status="IN_PROGRESS",
        created_at="2026-03-01T12:00:00Z", updated_at="2026-03-01T12:00:00Z",
    )  # fmt: skip


@pytest.fixture
def commits_during(
    monkeypatch: pytest.MonkeyPatch, saga: Saga
) -> Iterator[Callable[[Any, str], list[int]]]:
    """Make ``<module>.<name>`` commit one event of the saga after it has read: a write
    that lands while the page is read. Returns the ids of the events so written."""
    written: list[int] = []

    def patch(module: Any, name: str) -> list[int]:
        real = getattr(module, name)

        def reading(*args: Any, **kwargs: Any) -> Any:
            found = real(*args, **kwargs)
            if not written:
                entry = audit.record(
                    user=None, actor="worker", action="saga.note", saga=saga, to_state="x"
                )
                written.append(Event.objects.get(saga=saga, at=entry.at, actor="worker").pk)
            return found

        monkeypatch.setattr(module, name, reading)
        return written

    yield patch


def cursor(page: str) -> int:
    found = re.search(r"after=(\d+)", page)
    assert found is not None, "the page has no live cursor"
    return int(found.group(1))


@pytest.mark.parametrize(
    ("url", "module", "read"),
    [
        ("/sagas/shop/s-1/", visible, "saga_get_for_project"),
        ("/", visible, "saga_list"),
        ("/approvals/", work_queues, "approvals_pending"),
        ("/attention/", work_queues, "failures_open"),
    ],
)
def test_an_event_committed_while_the_page_is_read_is_after_its_cursor(
    shop: Project, saga: Saga, commits_during: Callable[[Any, str], list[int]],
    url: str, module: Any, read: str,
) -> None:  # fmt: skip
    written = commits_during(module, read)
    client = Client()
    client.force_login(person("ann", "operator", shop))
    page = client.get(url).content.decode()
    assert written, "the page did not read through the patched selector"
    assert cursor(page) < written[0]  # so the feed sends it, and the page catches up

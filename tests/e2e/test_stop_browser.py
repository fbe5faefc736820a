"""Stopping a running saga in real headless Chromium against a real uvicorn server: an
operator opens a saga its agent is running, writes a reason and requests the rollback; the
page then says it waits for the agent's next step, and the form is gone. No console errors.
Screenshots (the saga's head, light and dark): test-artifacts/saga-stop-requested-*.png.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.chromium import ARTIFACTS
from tests.support.e2e_site import seeded_site, signed_in

pytestmark = pytest.mark.slow

WAIT_MS = 15_000
PASSWORD = "pw-stop-e2e-2718"

MAKE_SAGAS = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sagaboard.api.event_schema import EventBatchIn
from sagaboard.record.services.ingest import events_ingest
from sagaboard.models import Project
from tests.support.agent_runs import storebot_events

project = Project.objects.create(slug="shop", name="Shop")
ann = get_user_model().objects.create_user("ann", password={PASSWORD!r})
ann.groups.add(Group.objects.get(name="operator"))
project.members.add(ann)
running = [e for e in storebot_events("s-running") if e["saga"]["status"] == "IN_PROGRESS"][:4]
events_ingest(project=project, events=EventBatchIn.model_validate({{"events": running}}).events)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with seeded_site(tmp_path_factory.mktemp("e2e-stop"), MAKE_SAGAS) as (base, _):
        yield base


@pytest.fixture
def ann(site: str) -> Iterator[Any]:
    with signed_in(site, "ann", PASSWORD, wait_ms=WAIT_MS) as page:
        yield page


def test_an_operator_requests_the_rollback_and_the_page_says_it_waits_for_the_agent(
    site: str, ann: Any
) -> None:
    from playwright.sync_api import expect

    ann.goto(site + "/sagas/shop/s-running/")
    expect(ann.locator("#stop-title")).to_have_text("Stop this saga")
    ann.fill("#stop-reason", "Refunding the wrong customer")
    ann.click("text=Request rollback")
    state = ann.locator("#stop-state")
    expect(state).to_contain_text("Rollback requested by ann")
    expect(state).to_contain_text("waiting for the agent's next step")
    expect(state).to_contain_text("Refunding the wrong customer")
    expect(ann.locator("#stop-title")).to_have_count(0)
    expect(ann.get_by_text("the agent rolls back at its next step boundary")).to_be_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    top = {"x": 0, "y": 0, "width": 1280, "height": 380}  # the message, the head, the state
    ann.screenshot(path=str(ARTIFACTS / "saga-stop-requested-light.png"), clip=top)
    ann.emulate_media(color_scheme="dark")
    ann.screenshot(path=str(ARTIFACTS / "saga-stop-requested-dark.png"), clip=top)
    ann.emulate_media(color_scheme="light")

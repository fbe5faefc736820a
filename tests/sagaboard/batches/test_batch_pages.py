"""Batch pages: confirm with the exact count and a sample, the job page, its progress, Cancel."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from sagaboard.batches.services import batches
from sagaboard.infra import jobs
from sagaboard.models import BatchJob, Project
from tests.support.batch_world import failed_undos
from tests.support.hitl import person

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture(autouse=True)
def no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "_on_commit", lambda name, *args: None)


@pytest.fixture
def operator(shop: Project) -> Client:
    client = Client()
    client.force_login(person("op-1", "operator", shop))
    return client


def test_the_attention_page_offers_all_matching_with_the_full_count(
    shop: Project, operator: Client
) -> None:
    failed_undos(shop, 230)
    page = operator.get("/attention/").content.decode()
    assert "all 230 in your projects" in page
    assert 'action="/batch/new/"' in page


def test_the_confirm_page_shows_the_exact_count_a_sample_and_asks_for_a_reason(
    shop: Project, operator: Client
) -> None:
    failed_undos(shop, 37)
    failed_undos(shop, 2, tool="ship_parcel", prefix="sp")
    page = operator.get("/batch/new/?action=resolve&tool=refund_payment&project=shop")
    body = page.content.decode()
    assert page.status_code == 200
    assert "Force-resolve: all 37 matching this filter?" in body
    assert "A sample (10 of 37)" in body
    assert body.count("refund_payment (step-1) in bf-flow") == 10
    assert 'name="expected" value="37"' in body
    assert 'name="reason" required' in body
    assert 'value="project=shop&amp;tool=refund_payment"' in body


def test_confirming_creates_the_job_and_redirects_to_its_page(
    shop: Project, operator: Client
) -> None:
    failed_undos(shop, 5)
    sent = operator.post(
        "/batch/new/",
        {"action": "leave", "filter": "project=shop", "expected": "5", "reason": "known outage"},
    )
    job = BatchJob.objects.get()
    assert sent.status_code == 302 and sent["Location"] == f"/batch/{job.pk}/"
    assert (job.total, job.reason, job.query) == (5, "known outage", "project=shop")
    page = operator.get(f"/batch/{job.pk}/").content.decode()
    assert "Leave failed: batch #" in page and 'hx-trigger="every 1s"' in page
    assert page.count('data-outcome="pending"') == 5


@pytest.mark.parametrize(
    ("data", "status", "says"),
    [
        (
            {"action": "leave", "filter": "", "expected": "5", "reason": ""},
            400,
            "a reason is required",
        ),
        (
            {"action": "leave", "filter": "", "expected": "4", "reason": "x"},
            409,
            "5 match now, 4 confirmed",
        ),
        ({"action": "nuke", "filter": "", "expected": "5", "reason": "x"}, 400, "action must be"),
        ({"action": "leave", "filter": "since=ever", "reason": "x"}, 400, "since"),
    ],
)
def test_a_refused_confirm_answers_4xx_with_the_reason_and_creates_nothing(
    shop: Project, operator: Client, data: dict[str, str], status: int, says: str
) -> None:
    failed_undos(shop, 5)
    answer = operator.post("/batch/new/", data)
    assert answer.status_code == status
    assert says in answer.content.decode()
    assert not BatchJob.objects.exists()


def test_progress_polls_until_the_job_ended_then_answers_286(
    shop: Project, operator: Client
) -> None:
    failed_undos(shop, 3)
    job = BatchJob.objects.get(pk=_job(shop, operator))
    running = operator.get(f"/batch/{job.pk}/progress/", headers=HTMX)
    assert running.status_code == 200 and "0 of 3" in running.content.decode()
    batches.batch_run(job.pk)
    done = operator.get(f"/batch/{job.pk}/progress/", headers=HTMX)
    body = done.content.decode()
    assert done.status_code == 286 and "3 of 3" in body and "every 1s" not in body
    assert '<progress id="batch-bar" max="3" value="3"' in body


def test_each_poll_sends_the_items_out_of_band_with_their_outcomes_filtered_as_shown(
    shop: Project, operator: Client
) -> None:
    """The job page's items move with its counts: a finished job never lists an item as
    "not started yet" beside counts that say it was done."""
    failed_undos(shop, 2)
    job = BatchJob.objects.get(pk=_job(shop, operator))
    before = operator.get(f"/batch/{job.pk}/progress/", headers=HTMX).content.decode()
    assert '<div id="batch-items" hx-swap-oob="true">' in before
    assert before.count('data-outcome="pending"') == 2
    batches.batch_run(job.pk)
    after = operator.get(f"/batch/{job.pk}/progress/", headers=HTMX).content.decode()
    assert 'data-outcome="pending"' not in after and after.count('class="batch-item outcome-') == 2
    none = operator.get(f"/batch/{job.pk}/progress/?outcome=refused", headers=HTMX)
    assert "No items with this outcome" in none.content.decode()


def test_the_items_table_filters_by_outcome(shop: Project, operator: Client) -> None:
    steps = failed_undos(shop, 4)
    pk = _job(shop, operator)
    steps[0].saga.delete()  # gone before the job reached it: refused, not found
    batches.batch_run(pk)
    refused = operator.get(f"/batch/{pk}/?outcome=refused").content.decode()
    assert (
        refused.count('data-outcome="refused"') == 1 and 'data-outcome="succeeded"' not in refused
    )
    assert "no such step in your projects" in refused
    everything = operator.get(f"/batch/{pk}/").content.decode()
    assert everything.count('class="batch-item outcome-') == 4


def test_cancel_by_htmx_answers_the_progress_and_a_viewer_is_refused(
    shop: Project, operator: Client
) -> None:
    failed_undos(shop, 2)
    pk = _job(shop, operator)
    viewer = Client()
    viewer.force_login(person("vi-1", "viewer", shop))
    assert viewer.post(f"/batch/{pk}/cancel/", headers=HTMX).status_code == 403
    cancelled = operator.post(f"/batch/{pk}/cancel/", headers=HTMX)
    assert cancelled.status_code == 200 and "cancelled" in cancelled.content.decode()
    listing = viewer.get("/batch/").content.decode()
    assert f'id="batch-{pk}"' in listing and "cancelled" in listing


def _job(shop: Project, client: Client) -> Any:
    sent = client.post(
        "/batch/new/", {"action": "leave", "filter": "project=shop", "reason": "known outage"}
    )
    assert sent.status_code == 302, sent.content
    return int(sent["Location"].strip("/").split("/")[-1])


def test_the_saga_list_offers_its_own_filter_for_a_batch(shop: Project, operator: Client) -> None:
    failed_undos(shop, 3)
    page = operator.get("/?project=shop&tool=refund_payment").content.decode()
    link = "/batch/new/?action=resolve&amp;project=shop&amp;tool=refund_payment"
    assert link in page and "?action=approve" not in page  # an operator is no approver
    confirm = operator.get(link.replace("&amp;", "&")).content.decode()
    assert "Force-resolve: all 3 matching this filter?" in confirm

"""API v1: a batch job's progress, totals and each item's result (README, "Batch operations").

Jobs are started by people on the dashboard; a token reads the jobs whose every item is in
its project. Reading settles first what has ended (``batch_outcomes.job_current``), so the
answer is what each undo the job asked for has come to now.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Path, Query, Router

from sagaboard.access.api.caller import caller_token
from sagaboard.actions.services import batch_outcomes
from sagaboard.api.errors import ERRORS
from sagaboard.api.schemas import Out
from sagaboard.batches.services import batches
from sagaboard.infra.http.limits import BIGINT
from sagaboard.models import BatchItem, BatchJob

router = Router(tags=["batches"])

Result = Literal[
    "succeeded", "failed_again", "skipped", "running", "waiting_for_approver", "not_started"
]
PAGE = 500


class BatchTotalsOut(Out):
    succeeded: int
    """Undone (retry, approve), resolved by hand, left failed or rejected: ``succeeded_means``."""
    failed_again: int
    skipped: int
    running: int
    waiting_for_approver: int
    not_started: int


class BatchItemOut(Out):
    position: int
    kind: Literal["step", "approval"]
    target_id: int
    label: str
    result: Result
    result_label: str
    detail: str
    done_at: datetime | None
    saga_id: str | None
    step_id: str | None
    url: str | None
    """The saga page at the item's step (a dashboard path); null once the step is deleted."""


class BatchJobOut(Out):
    id: int
    action: BatchJob.Action  # type: ignore[valid-type]
    state: Literal["queued", "running", "cancelling", "finishing", "cancelled", "finished"]
    outcomes_known: bool
    """Every undo the job started has ended (``state`` finished or cancelled)."""
    actor: str
    reason: str
    filter: str
    total: int
    requests_made: int
    known: int
    totals: BatchTotalsOut
    succeeded_means: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancelled_by: str
    items: list[BatchItemOut]
    next_after: int | None
    """The ``after`` of the next page of items, or null."""


@router.get(
    "/batches/{job_id}",
    response={200: BatchJobOut, **ERRORS},
    summary="A batch job: its progress, totals and each item's result",
)
def get_batch(
    request: HttpRequest,
    job_id: int = Path(..., ge=1, le=BIGINT),
    result: Result | None = None,
    after: int | None = Query(None, ge=0, le=batches.MAX_ITEMS, description="item position"),
    limit: int = Query(PAGE, ge=1, le=1000),
) -> dict[str, Any]:
    """The job and its items in order (``result``: only those; ``after``: the next page)."""
    job = batches.job_get_for_project(project=caller_token(request).project, pk=job_id)
    return job_view(batch_outcomes.job_current(job), result=result, after=after, limit=limit)


def job_view(
    job: BatchJob, *, result: str | None = None, after: int | None = None, limit: int = PAGE
) -> dict[str, Any]:
    """The job as the API answers it (``BatchJobOut``)."""
    items = BatchItem.objects.filter(job=job).order_by("position")
    if result:
        items = items.filter(batch_outcomes.outcome_filter(result))
    if after is not None:
        items = items.filter(position__gt=after)
    page = list(items[: limit + 1])
    more, page = len(page) > limit, page[:limit]
    places = batch_outcomes.item_places(page)
    labels = batch_outcomes.labels(job.action)
    return {
        "id": job.pk, "action": job.action, "state": job.state, "outcomes_known": job.ended,
        "actor": job.actor, "reason": job.reason, "filter": job.query, "total": job.total,
        "requests_made": job.done, "known": job.known, "totals": batch_outcomes.totals(job),
        "succeeded_means": labels["succeeded"], "created_at": job.created_at,
        "started_at": job.started_at, "finished_at": job.finished_at,
        "cancelled_by": job.cancelled_by,
        "items": [_item(item, places.get(item.pk), labels) for item in page],
        "next_after": page[-1].position if more else None,
    }  # fmt: skip


def _item(item: BatchItem, place: Any, labels: dict[str, str]) -> dict[str, Any]:
    key = item.outcome or batch_outcomes.NOT_STARTED
    return {
        "position": item.position, "kind": item.kind, "target_id": item.target_pk,
        "label": item.label, "result": batch_outcomes.PUBLIC[key], "result_label": labels[key],
        "detail": item.message, "done_at": item.done_at,
        "saga_id": place.saga_id if place else None, "step_id": place.step_id if place else None,
        "url": place.url if place else None,
    }  # fmt: skip

"""Many failed undos at once, for batch operations' tests and benchmark.

Rows written directly (``bulk_create``), as an agent's mirrored sagas would leave them:
each saga ROLLBACK_FAILED on one step whose undo failed. The agent runs these sagas
(driver ``client``), so a retry or a resolve is a request the agent's SDK picks up:
nothing runs in-process, and what a batch costs is sagaboard's own work.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sagaboard.models import Project, Saga, Step


def failed_undos(
    project: Project, n: int, *, tool: str = "refund_payment", prefix: str = "bf"
) -> list[Step]:
    """``n`` sagas of ``project``, each halted on one failed undo of ``tool``; the steps."""
    now = datetime.now(UTC)
    sagas = Saga.objects.bulk_create(
        (
            Saga(
                project=project,
                saga_id=f"{prefix}-{i}",
                name=f"{prefix}-flow",
                status="ROLLBACK_FAILED",
                driver=Saga.Driver.CLIENT,
                created_at=now,
                updated_at=now,
                failed_step="step-2",
                waiting_for="OPERATOR",
            )
            for i in range(n)
        ),
        batch_size=1000,
    )
    if not sagas[0].pk:  # databases that do not return keys from a bulk insert
        sagas = list(Saga.objects.filter(project=project, saga_id__startswith=f"{prefix}-"))
    Step.objects.bulk_create(
        (
            Step(
                saga=s,
                step_id="step-1",
                position=1,
                tool_name=tool,
                state="ROLLBACK_FAILED",
                error="HTTP 503 from the payments API",
                error_type="HTTPError",
                idempotency_key=f"{s.saga_id}:step-1",
                created_at=now,
                updated_at=now,
            )
            for s in sagas
        ),
        batch_size=1000,
    )
    return list(Step.objects.filter(saga__in=sagas).order_by("pk"))


def demo_batch() -> int:
    """A batch job on the demo (a retry of its failed undos, cancelled before any worker took
    it: the demo stays as it is), so the batch pages have something to show."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.http import QueryDict

    from sagaboard.batches.services import batches

    user = get_user_model().objects.get(username="demo")
    with transaction.atomic():  # the worker is asked on commit: by then it is cancelled
        job = batches.batch_create(
            user=user,
            action="retry",
            query=QueryDict("project=demo"),
            reason="payments API back after the outage",
            expected=None,
        )
        batches.batch_cancel(user=user, pk=job.pk)
    return job.pk


def crash_seed(n: int = 30) -> None:
    """For the killed-worker test (run in ``manage shell``): ``n`` failed undos in project
    ``shop``, an operator, and a confirmed "leave" batch over all of them, queued on the
    broker when it commits. Prints the job's pk and the steps' pks as JSON."""
    import json

    from django.contrib.auth.models import Group, Permission
    from django.http import QueryDict

    from sagaboard.access.services.roles import roles_sync
    from sagaboard.batches.services import batches
    from tests.support.hitl import person

    roles_sync(Group, Permission)
    shop = Project.objects.create(slug="shop", name="Shop")
    steps = failed_undos(shop, n)
    user = person("op-crash", "operator", shop)
    job = batches.batch_create(
        user=user,
        action="leave",
        query=QueryDict("project=shop"),
        reason="known outage, handled by finance",
        expected=n,
    )
    print(json.dumps({"job": job.pk, "steps": [s.pk for s in steps]}))


def screenshot_batch(n: int = 40) -> int:
    """For the batch job's screenshot: ``n`` more failed undos of refund_payment on the demo, a
    colleague's retry of three of them, then a "leave failed" over all of them, run here."""
    import time

    from django.contrib.auth import get_user_model
    from django.http import QueryDict

    from sagaboard.actions.services import operator_actions
    from sagaboard.batches.services import batches

    demo = Project.objects.get(slug="demo")
    steps = failed_undos(demo, n, prefix="refund-2026-12-02")
    user = get_user_model().objects.get(username="demo")
    job = batches.batch_create(
        user=user,
        action="leave",
        query=QueryDict("project=demo&tool=refund_payment&q=refund-2026"),
        reason="payments API outage 09:58-10:20: refunds re-issued by finance (INC-4411)",
        expected=None,
    )
    for step in steps[5:8]:  # a colleague got there first: these items are refused
        operator_actions.step_act(step_pk=step.pk, user=user, action="retry", reason="")
    while batches.batch_run(job.pk, chunk=10) == "busy":  # a demo worker may hold it
        time.sleep(0.2)
    return job.pk

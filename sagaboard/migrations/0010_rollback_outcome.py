"""Each saga's rollback outcome (CLEAN / WITH_EXCEPTIONS) and whom it waits for, on its row.

Backfilled from the stored steps with undo_core's own ``assess_rollback``, so a
saga rolled back before this migration reads the same as one rolled back after.
"""

from django.db import migrations, models

from undo_core import SagaStatus, StepFacts, StepState, assess_rollback

ROLLING = [SagaStatus.COMPENSATING, SagaStatus.ROLLED_BACK, SagaStatus.ROLLBACK_FAILED]
BATCH = 500


def backfill(apps, schema_editor):
    Saga = apps.get_model("sagaboard", "Saga")
    Step = apps.get_model("sagaboard", "Step")
    last = 0
    while True:
        sagas = list(Saga.objects.filter(status__in=ROLLING, pk__gt=last).order_by("pk")[:BATCH])
        if not sagas:
            return
        last = sagas[-1].pk
        steps = {s.pk: [] for s in sagas}
        rows = (
            Step.objects.filter(saga_id__in=list(steps))
            .order_by("position")
            .values_list(
                "saga_id", "step_id", "tool_name", "state", "has_undo", "left_at", "decision_note"
            )
        )
        for saga_pk, step_id, tool, state, has_undo, left_at, note in rows:
            steps[saga_pk].append(
                StepFacts(step_id, tool, StepState(state), has_undo, left_at is not None, note)
            )
        for saga in sagas:
            found = assess_rollback(SagaStatus(saga.status), steps[saga.pk])
            saga.outcome = found.outcome.value if found.outcome else None
            saga.outcome_summary = found.summary[:200]
            saga.waiting_for = found.waiting_for.value if found.waiting_for else None
        Saga.objects.bulk_update(sagas, ["outcome", "outcome_summary", "waiting_for"])


class Migration(migrations.Migration):
    dependencies = [
        ("sagaboard", "0009_event_change"),
    ]

    operations = [
        migrations.AddField(
            model_name="saga",
            name="outcome",
            field=models.CharField(
                blank=True,
                choices=[("CLEAN", "CLEAN"), ("WITH_EXCEPTIONS", "WITH_EXCEPTIONS")],
                max_length=20,
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="saga",
            name="outcome_summary",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddField(
            model_name="saga",
            name="waiting_for",
            field=models.CharField(
                blank=True,
                choices=[("APPROVAL", "APPROVAL"), ("OPERATOR", "OPERATOR")],
                max_length=10,
                null=True,
            ),
        ),
        migrations.AddIndex(
            model_name="saga",
            index=models.Index(
                fields=["project", "outcome", "-changed_at", "-id"], name="saga_project_outcome"
            ),
        ),
        migrations.AddIndex(
            model_name="saga",
            index=models.Index(
                fields=["project", "waiting_for", "-changed_at", "-id"],
                name="saga_project_waiting",
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]

"""The server's own times on sagas and steps; lists and their indexes move to them.

``Saga.received_at`` / ``Saga.changed_at`` / ``Step.changed_at`` are filled for rows
stored before this migration from the event log, whose ``recorded_at`` was always the
server's clock: the first event of a saga is when the server received it, its newest
engine event (``seq`` set; operators' events have none) when it last changed, and a
step's newest event names the step. Only a row with no such event (none should
exist) falls back to the time the agent reported (``created_at`` / ``updated_at``).
"""

import django.utils.timezone
from django.db import migrations, models

BACKFILL_SAGAS = """
UPDATE sagaboard_saga SET
  received_at = COALESCE(
    (SELECT MIN(e.recorded_at) FROM sagaboard_event e WHERE e.saga_id = sagaboard_saga.id),
    created_at),
  changed_at = COALESCE(
    (SELECT MAX(e.recorded_at) FROM sagaboard_event e
      WHERE e.saga_id = sagaboard_saga.id AND e.seq IS NOT NULL),
    updated_at)
"""

BACKFILL_STEPS = """
UPDATE sagaboard_step SET
  changed_at = COALESCE(
    (SELECT MAX(e.recorded_at) FROM sagaboard_event e
      WHERE e.saga_id = sagaboard_step.saga_id AND e.step_id = sagaboard_step.step_id
        AND e.seq IS NOT NULL),
    updated_at,
    created_at,
    (SELECT s.changed_at FROM sagaboard_saga s WHERE s.id = sagaboard_step.saga_id))
"""


class Migration(migrations.Migration):
    dependencies = [
        ("sagaboard", "0007_heartbeat"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="saga", name="saga_project_recent"),
        migrations.RemoveIndex(model_name="saga", name="saga_project_status"),
        migrations.RemoveIndex(model_name="saga", name="saga_status_recent"),
        migrations.RemoveIndex(model_name="step", name="step_state_recent"),
        migrations.AddField(
            model_name="saga",
            name="received_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AddField(
            model_name="saga",
            name="changed_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AddField(
            model_name="step",
            name="changed_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.RunSQL(BACKFILL_SAGAS, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(BACKFILL_STEPS, reverse_sql=migrations.RunSQL.noop),
        migrations.AddIndex(
            model_name="saga",
            index=models.Index(
                fields=["project", "-changed_at", "-id"], name="saga_project_recent"
            ),
        ),
        migrations.AddIndex(
            model_name="saga",
            index=models.Index(
                fields=["project", "status", "-changed_at", "-id"], name="saga_project_status"
            ),
        ),
        migrations.AddIndex(
            model_name="saga",
            index=models.Index(fields=["status", "-changed_at"], name="saga_status_recent"),
        ),
        migrations.AddIndex(
            model_name="step",
            index=models.Index(fields=["state", "changed_at"], name="step_state_recent"),
        ),
    ]

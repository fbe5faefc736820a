"""PostgreSQL: NOTIFY sagaboard_event at the commit of every transaction that logs events.

The live relay LISTENs on it (sagaboard/live/wake.py) and reads the log when woken, so
an event reaches browsers at its commit rather than at the next poll, whichever process
(or tool) wrote it. One trigger per statement, not per row: a batch of a thousand events
costs one NOTIFY, and PostgreSQL folds identical notifications of a transaction into one.
A rolled-back transaction notifies nobody. SQLite has no NOTIFY (sagaboard/infra/
event_wake.py wakes the relay from the committing process instead): nothing to do there.
"""

from django.db import migrations

CREATE = (
    """
CREATE OR REPLACE FUNCTION sagaboard_event_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sagaboard_event', '');
    RETURN NULL;
END;
$$
""",
    """
CREATE TRIGGER sagaboard_event_notify
    AFTER INSERT ON sagaboard_event
    FOR EACH STATEMENT EXECUTE FUNCTION sagaboard_event_notify()
""",
)

DROP = (
    "DROP TRIGGER IF EXISTS sagaboard_event_notify ON sagaboard_event",
    "DROP FUNCTION IF EXISTS sagaboard_event_notify()",
)


def _on_postgresql(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for sql in statements:
                schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("sagaboard", "0020_overview_rollup"),
    ]

    operations = [
        migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP), elidable=False),
    ]

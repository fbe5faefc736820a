# A saga name or id prefix (saga_search._prefix) served by an index on each database.
# SQLite: its LIKE is case-insensitive, and only an index in the NOCASE collation serves it
# as a range (the id's GLOB uses the unique (project, saga_id) index). PostgreSQL: under a
# locale's collation a b-tree serves LIKE 'x%' only with the text_pattern_ops operator class.

from django.db import migrations

FORWARD = {
    "sqlite": [
        "CREATE INDEX IF NOT EXISTS saga_project_name_nocase"
        " ON sagaboard_saga (project_id, name COLLATE NOCASE)",
    ],
    "postgresql": [
        "CREATE INDEX IF NOT EXISTS saga_project_name_prefix"
        " ON sagaboard_saga (project_id, (upper(name::text)) text_pattern_ops)",
        "CREATE INDEX IF NOT EXISTS saga_project_id_prefix"
        " ON sagaboard_saga (project_id, (saga_id::text) text_pattern_ops)",
    ],
}
BACKWARD = {
    "sqlite": ["DROP INDEX IF EXISTS saga_project_name_nocase"],
    "postgresql": [
        "DROP INDEX IF EXISTS saga_project_name_prefix",
        "DROP INDEX IF EXISTS saga_project_id_prefix",
    ],
}


def _run(statements):
    def run(apps, schema_editor):
        for sql in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):

    dependencies = [("sagaboard", "0013_search_list_and_search")]

    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD))]

# A saga name prefix on SQLite (saga_search._sqlite_prefix): SQLite's LIKE is
# case-insensitive, and only an index in the NOCASE collation serves it as a range.
# PostgreSQL needs none (its list walks the sort's index; measured in benchmarks.search).

from django.db import migrations

INDEX = "saga_project_name_nocase"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON sagaboard_saga (project_id, name COLLATE NOCASE)",
            params=None,
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}", params=None)


class Migration(migrations.Migration):
    dependencies = [("sagaboard", "0013_search_list_and_search")]

    operations = [migrations.RunPython(create, drop)]

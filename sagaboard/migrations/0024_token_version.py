"""The token version: triggers move it with every change to a token or a project.

Web processes cache the tokens they have checked and compare this number on every API
request (``sagaboard.models.ApiTokenVersion``). The triggers fire on what a cached token
holds (its hash, prefix, revocation, project; a project's slug and name) and on deletes,
never on ``last_used_at``, which the API itself writes. In the writer's own transaction:
a revocation and the version's move commit together.
"""

from django.db import migrations, models

TOKEN_COLUMNS = "prefix, secret_hash, revoked_at, project_id, label"
BUMP = "UPDATE sagaboard_apitokenversion SET number = number + 1 WHERE id = 1"

SQLITE = (
    f"""CREATE TRIGGER sagaboard_apitoken_version_update
    AFTER UPDATE OF {TOKEN_COLUMNS} ON sagaboard_apitoken BEGIN {BUMP}; END""",
    f"""CREATE TRIGGER sagaboard_apitoken_version_delete
    AFTER DELETE ON sagaboard_apitoken BEGIN {BUMP}; END""",
    f"""CREATE TRIGGER sagaboard_project_token_version_update
    AFTER UPDATE OF slug, name ON sagaboard_project BEGIN {BUMP}; END""",
)
SQLITE_DROP = (
    "DROP TRIGGER IF EXISTS sagaboard_apitoken_version_update",
    "DROP TRIGGER IF EXISTS sagaboard_apitoken_version_delete",
    "DROP TRIGGER IF EXISTS sagaboard_project_token_version_update",
)
POSTGRESQL = (
    f"""CREATE OR REPLACE FUNCTION sagaboard_token_version_bump() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    {BUMP};
    RETURN NULL;
END;
$$""",
    f"""CREATE TRIGGER sagaboard_apitoken_version_update
    AFTER UPDATE OF {TOKEN_COLUMNS} ON sagaboard_apitoken
    FOR EACH STATEMENT EXECUTE FUNCTION sagaboard_token_version_bump()""",
    """CREATE TRIGGER sagaboard_apitoken_version_delete AFTER DELETE ON sagaboard_apitoken
    FOR EACH STATEMENT EXECUTE FUNCTION sagaboard_token_version_bump()""",
    """CREATE TRIGGER sagaboard_project_token_version_update
    AFTER UPDATE OF slug, name ON sagaboard_project
    FOR EACH STATEMENT EXECUTE FUNCTION sagaboard_token_version_bump()""",
)
POSTGRESQL_DROP = (
    "DROP TRIGGER IF EXISTS sagaboard_apitoken_version_update ON sagaboard_apitoken",
    "DROP TRIGGER IF EXISTS sagaboard_apitoken_version_delete ON sagaboard_apitoken",
    "DROP TRIGGER IF EXISTS sagaboard_project_token_version_update ON sagaboard_project",
    "DROP FUNCTION IF EXISTS sagaboard_token_version_bump()",
)


def install(apps, schema_editor):
    apps.get_model("sagaboard", "ApiTokenVersion").objects.get_or_create(id=1)
    statements = {"sqlite": SQLITE, "postgresql": POSTGRESQL}
    for sql in statements.get(schema_editor.connection.vendor, ()):
        schema_editor.execute(sql, params=None)


def remove(apps, schema_editor):
    statements = {"sqlite": SQLITE_DROP, "postgresql": POSTGRESQL_DROP}
    for sql in statements.get(schema_editor.connection.vendor, ()):
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("sagaboard", "0023_batch_outcomes"),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiTokenVersion",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False),
                ),
                ("number", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(install, remove, elidable=False),
    ]

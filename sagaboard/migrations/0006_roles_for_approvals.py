"""The roles again, now that approvals and policies have permissions (see sagaboard/roles.py)."""

from django.db import migrations


def sync_roles(apps, schema_editor):
    import importlib

    importlib.import_module("sagaboard.migrations.0004_roles").create_roles(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("sagaboard", "0005_approvals")]

    operations = [migrations.RunPython(sync_roles, migrations.RunPython.noop)]

"""The four dashboard roles as groups (see sagaboard/roles.py)."""

from django.db import migrations

from sagaboard.roles import ROLES, roles_sync

def create_roles(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    roles_sync(apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"))


def drop_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=list(ROLES)).delete()


class Migration(migrations.Migration):
    dependencies = [("sagaboard", "0003_saga_permissions"), ("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(create_roles, drop_roles)]

"""The four dashboard roles as groups (see sagaboard/access/services/roles.py).

The role -> permission table is a frozen copy of sagaboard/access/services/roles.py as it was
when this migration was written: history must not change when the live table does (a later
migration brings the groups up to date, as 0006 does).
"""

from django.db import migrations

ROLES = {
    "viewer": ["view_saga", "view_step", "view_event", "view_compensationattempt"],
    "operator": ["retry_compensation", "resolve_step"],
    "approver": ["decide_approval"],
    "admin": [
        "manage_policies", "add_project", "change_project", "view_project",
        "add_apitoken", "change_apitoken", "view_apitoken", "view_auditentry",
    ],
}  # fmt: skip
INCLUDES = {
    "viewer": [],
    "operator": ["viewer"],
    "approver": ["viewer"],
    "admin": ["viewer", "operator", "approver"],
}


def create_roles(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    group_model, permission_model = apps.get_model("auth", "Group"), apps.get_model("auth", "Permission")
    for role in ROLES:
        codenames = [c for r in [role, *INCLUDES[role]] for c in ROLES[r]]
        group, _ = group_model.objects.get_or_create(name=role)
        group.permissions.set(
            permission_model.objects.filter(content_type__app_label="sagaboard", codename__in=codenames)
        )


def drop_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=list(ROLES)).delete()


class Migration(migrations.Migration):
    dependencies = [("sagaboard", "0003_saga_permissions"), ("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(create_roles, drop_roles)]

"""The roles again, now that approvals and policies have permissions
(see sagaboard/access/services/roles.py).

Its own frozen copy of the role -> permission table as it was then (nothing imported from
live code or another migration), so history stays as it ran.
"""

from django.db import migrations

ROLES = {
    "viewer": [
        "view_saga", "view_step", "view_event", "view_compensationattempt",
        "view_approval", "view_approvalvote", "view_approvalpolicy",
    ],
    "operator": ["retry_compensation", "resolve_step"],
    "approver": ["decide_approval"],
    "admin": [
        "manage_policies", "add_project", "change_project", "view_project",
        "add_apitoken", "change_apitoken", "view_apitoken", "view_auditentry",
        "add_approvalpolicy", "change_approvalpolicy",
    ],
}  # fmt: skip
INCLUDES = {
    "viewer": [],
    "operator": ["viewer"],
    "approver": ["viewer"],
    "admin": ["viewer", "operator", "approver"],
}


def sync_roles(apps, schema_editor):
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


class Migration(migrations.Migration):
    dependencies = [("sagaboard", "0005_approvals")]

    operations = [migrations.RunPython(sync_roles, migrations.RunPython.noop)]

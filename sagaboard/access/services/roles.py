"""The four dashboard roles, as Django groups with permissions.

viewer reads; operator also retries and force-resolves failed undos and requests
the rollback of running sagas; approver also approves or rejects undos (approving
does not imply operating); both also collaborate (notes, owners, acknowledgements);
admin has all of that plus projects, tokens and policies.
"""

from __future__ import annotations

from typing import Any

ROLES: dict[str, list[str]] = {
    "viewer": [
        "view_saga", "view_step", "view_event", "view_compensationattempt",
        "view_approval", "view_approvalvote", "view_approvalpolicy",
    ],
    "operator": ["retry_compensation", "resolve_step", "collaborate", "request_rollback"],
    "approver": ["decide_approval", "collaborate"],
    "admin": [
        "manage_policies", "add_project", "change_project", "view_project",
        "add_apitoken", "change_apitoken", "view_apitoken", "view_auditentry",
        "add_approvalpolicy", "change_approvalpolicy",
    ],
}  # fmt: skip
INCLUDES: dict[str, list[str]] = {
    "viewer": [],
    "operator": ["viewer"],
    "approver": ["viewer"],
    "admin": ["viewer", "operator", "approver"],
}


def roles_sync(group_model: Any, permission_model: Any) -> None:
    """Create or update the groups; takes the models so a migration can pass its own."""
    for role in ROLES:
        codenames = [c for r in [role, *INCLUDES[role]] for c in ROLES[r]]
        group, _ = group_model.objects.get_or_create(name=role)
        group.permissions.set(
            permission_model.objects.filter(
                content_type__app_label="sagaboard", codename__in=codenames
            )
        )

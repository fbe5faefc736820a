"""Approval policies: admins' rules, validated whole before anything is saved; edits audited."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from sagaboard.approvals.services import conditions
from sagaboard.audit.services import audit
from sagaboard.models import ApprovalPolicy, AuditEntry, Project, User

MAX_TIMEOUT = 30 * 24 * 3600


class PolicyInvalid(Exception):
    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


def _clean(data: Any) -> tuple[dict[str, Any], dict[str, str]]:
    errors: dict[str, str] = {}
    name = (data.get("name") or "").strip()
    if not name or len(name) > 100:
        errors["name"] = "a name of 1 to 100 characters is required"
    glob = (data.get("tool_glob") or "").strip() or "*"
    if len(glob) > 200:
        errors["tool_glob"] = "at most 200 characters"
    condition = (data.get("condition") or "").strip()
    if condition:
        try:
            conditions.parse(condition)
        except conditions.ConditionError as err:
            errors["condition"] = str(err)
    approvers = str(data.get("approvers_required") or "1")
    if approvers not in ("1", "2"):
        errors["approvers_required"] = "1, or 2 for four eyes"
    timeout_raw = str(data.get("timeout_seconds") or "").strip()
    timeout = None
    if timeout_raw:
        if not timeout_raw.isdigit() or not 60 <= int(timeout_raw) <= MAX_TIMEOUT:
            errors["timeout_seconds"] = f"empty (never), or 60 to {MAX_TIMEOUT} seconds"
        else:
            timeout = int(timeout_raw)
    on_expiry = data.get("on_expiry") or ApprovalPolicy.OnExpiry.WAIT
    if on_expiry not in ApprovalPolicy.OnExpiry.values:
        errors["on_expiry"] = "wait or reject"
    enabled = str(data.get("enabled", "")).lower() in ("1", "true", "on", "yes")
    clean = {
        "name": name, "tool_glob": glob, "condition": condition,
        "approvers_required": int(approvers) if approvers in ("1", "2") else 1,
        "timeout_seconds": timeout, "on_expiry": on_expiry, "enabled": enabled,
    }  # fmt: skip
    return clean, errors


def policy_save(
    *, project: Project, data: Any, user: User, policy: ApprovalPolicy | None = None
) -> ApprovalPolicy:
    """Create or edit a policy; an edit bumps its version (approvals keep theirs)."""
    if not user.has_perm("sagaboard.manage_policies"):
        raise PolicyInvalid({"all": "editing policies needs the admin role"})
    clean, errors = _clean(data)
    if errors:
        raise PolicyInvalid(errors)
    with transaction.atomic():
        if policy is None:
            policy = ApprovalPolicy(project=project, version=1)
            before: dict[str, Any] = {}
        else:
            policy = ApprovalPolicy.objects.select_for_update().get(pk=policy.pk)
            before = {k: getattr(policy, k) for k in clean}
            policy.version += 1
        for key, value in clean.items():
            setattr(policy, key, value)
        policy.updated_by, policy.updated_at = audit.actor_of(user), timezone.now()
        policy.save()
        AuditEntry.objects.create(
            project=project, user=user, actor=audit.actor_of(user),
            action="policy.create" if not before else "policy.edit",
            target=f"policy:{policy.pk}", reason=data.get("reason", "") or "",
            data={"before": before, "after": clean, "version": policy.version},
        )  # fmt: skip
    return policy

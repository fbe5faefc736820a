"""Django admin for every model; audit records and the event log are read-only.

Approvals, votes and policies are read-only here too: deciding and editing go
through the dashboard's services, which lock, version and audit them.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from sagaboard.models import (
    ApiRequest,
    ApiToken,
    ApiTokenVersion,
    Approval,
    ApprovalPolicy,
    ApprovalVote,
    AuditChain,
    AuditEntry,
    BatchItem,
    BatchJob,
    CompensationAttempt,
    DecisionLink,
    Event,
    Heartbeat,
    Note,
    NoteRevision,
    Notification,
    Project,
    Saga,
    SagaCount,
    SagaCountChange,
    SavedView,
    SlackIdentity,
    SlackRequest,
    Step,
    ToolRollup,
    ToolRollupCursor,
    ToolRollupMark,
)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Records of what happened: shown, never edited or deleted here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    # Tokens are minted by `manage.py sagaboard_token` (the secret is shown once there).
    list_display = ["prefix", "label", "project", "created_at", "revoked_at"]
    list_filter = ["project"]
    readonly_fields = ["prefix", "secret_hash", "created_at", "created_by", "last_used_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class StepInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Step
    fields = ["step_id", "tool_name", "state", "error", "changed_at", "updated_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Saga)
class SagaAdmin(ReadOnlyAdmin):
    # changed_at is the server's clock; updated_at what the agent reported.
    list_display = ["name", "saga_id", "project", "status", "driver", "changed_at", "updated_at"]
    list_filter = ["status", "driver", "project"]
    search_fields = ["saga_id", "name"]
    inlines = [StepInline]


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ["step_id", "tool_name", "state", "saga", "changed_at", "updated_at"]
    list_filter = ["state"]
    search_fields = ["tool_name", "saga__saga_id"]


@admin.register(CompensationAttempt)
class CompensationAttemptAdmin(ReadOnlyAdmin):
    list_display = ["step", "number", "outcome", "started_at", "actor"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["id", "saga", "seq", "kind", "step_id", "from_state", "to_state", "at"]
    list_filter = ["kind", "to_state"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor", "action", "target", "reason", "chain", "seq"]
    list_filter = ["action"]
    search_fields = ["actor", "target", "reason"]


@admin.register(AuditChain)
class AuditChainAdmin(ReadOnlyAdmin):
    list_display = ["key", "seq", "head"]


@admin.register(ApiRequest)
class ApiRequestAdmin(ReadOnlyAdmin):
    list_display = ["event_id", "operation", "saga_id", "step_id", "created_at"]


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(ReadOnlyAdmin):
    list_display = ["project", "name", "tool_glob", "condition", "approvers_required", "version"]


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ["id", "saga", "step", "status", "required", "created_at", "decided_at"]
    list_filter = ["status"]


@admin.register(ApprovalVote)
class ApprovalVoteAdmin(ReadOnlyAdmin):
    list_display = ["approval", "user", "decision", "reason", "at"]


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "created_at", "attempts", "delivered_at", "last_error"]


@admin.register(DecisionLink)
class DecisionLinkAdmin(ReadOnlyAdmin):
    list_display = ["id", "approval", "user", "created_at", "expires_at", "used_at"]
    exclude = ["token_hash"]


@admin.register(SlackIdentity)
class SlackIdentityAdmin(ReadOnlyAdmin):
    """Linked with ``manage.py sagaboard_slack_link`` (audited), not here."""

    list_display = ["slack_user_id", "user", "linked_at"]


@admin.register(SlackRequest)
class SlackRequestAdmin(ReadOnlyAdmin):
    list_display = ["signature", "seen_at"]


@admin.register(Note)
class NoteAdmin(ReadOnlyAdmin):
    """Operators' notes: written on the saga page (audited there), never edited here."""

    list_display = ["saga", "step", "author_name", "created_at", "edited_at", "deleted_at"]


@admin.register(NoteRevision)
class NoteRevisionAdmin(ReadOnlyAdmin):
    list_display = ["note", "written_by", "written_at", "replaced_by", "replaced_at"]


@admin.register(BatchJob)
class BatchJobAdmin(ReadOnlyAdmin):
    """Batch jobs: confirmed and cancelled on the dashboard (audited there), never here."""

    list_display = ["id", "action", "actor", "state", "done", "total", "created_at"]
    list_filter = ["state", "action"]


@admin.register(BatchItem)
class BatchItemAdmin(ReadOnlyAdmin):
    list_display = ["job", "position", "kind", "target_pk", "outcome", "done_at"]
    list_filter = ["outcome"]


@admin.register(Heartbeat)
class HeartbeatAdmin(ReadOnlyAdmin):
    list_display = ["name", "at"]


@admin.register(SavedView)
class SavedViewAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "user", "project", "shared", "created_at"]
    list_filter = ["shared", "project"]
    search_fields = ["name", "user__username"]


@admin.register(SagaCount, SagaCountChange)
class SagaCountAdmin(ReadOnlyAdmin):
    """The overview's rollup: kept by the database's triggers, never edited by hand."""

    list_display = ["project_id", "span", "bucket_start", "key", "n"]


@admin.register(ApiTokenVersion)
class ApiTokenVersionAdmin(ReadOnlyAdmin):
    """The token version: moved by the database's triggers, never edited by hand (a web
    process's token cache is valid for one value)."""

    list_display = ["id", "number"]


@admin.register(ToolRollup, ToolRollupMark, ToolRollupCursor)
class ToolRollupAdmin(ReadOnlyAdmin):
    """Per-tool health rollups: derived from the steps by the fold, never edited by hand."""

"""sagaboard's tables: projects and their tokens, sagas, steps, attempts, the event log, audit.

Sagas, steps and attempts mirror undo_core's records field for field; the
transition rules are undo_core's own (``sagaboard.storage.DjangoStore`` and
``sagaboard.ingest`` call them), never a second copy here.

Agent-supplied values (inputs, outputs, metadata, declarative state) are kept
as JSON *text*: it round-trips any JSON exactly on every database (PostgreSQL's
jsonb would reject ``\\u0000`` and reorder keys).
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from undo_core import SagaStatus, StepState


class JSONTextField(models.TextField):  # type: ignore[type-arg]
    """JSON stored as text, returned as Python values; ``None`` is SQL NULL."""

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        return None if value is None else json.loads(value)

    def to_python(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    def get_prep_value(self, value: Any) -> str | None:
        if value is None:
            return None
        return json.dumps(value, ensure_ascii=False, allow_nan=False)


class Project(models.Model):
    """A tenant: every saga, token and policy belongs to one project."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="sagaboard_projects"
    )
    """Who may see the project's sagas in the dashboard (superusers see every project)."""

    def __str__(self) -> str:
        return self.slug


class ApiToken(models.Model):
    """A project's API token. Only a prefix and a SHA-256 of the whole token are kept."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tokens")
    label = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix} ({self.label})"

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class Saga(models.Model):
    """One saga; ``saga_id`` is undo_core's id, unique within its project."""

    class Driver(models.TextChoices):
        CLIENT = "client", "run by the agent (mirrored)"
        SERVER = "server", "run by sagaboard"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="sagas")
    saga_id = models.CharField(max_length=100)
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=20, choices=[(s.value, s.value) for s in SagaStatus])
    driver = models.CharField(max_length=10, choices=Driver.choices, default=Driver.CLIENT)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    seq = models.BigIntegerField(default=0)
    next_step_number = models.IntegerField(default=1)
    options = JSONTextField(default=dict)
    state = JSONTextField(null=True, blank=True)
    failed_step = models.CharField(max_length=100, null=True, blank=True)
    lease_owner = models.CharField(max_length=200, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "saga_id"], name="saga_unique_per_project")
        ]
        permissions = [
            ("retry_compensation", "Can retry a failed undo"),
            ("resolve_step", "Can force-resolve a failed undo"),
            ("decide_approval", "Can approve or reject an undo"),
            ("manage_policies", "Can edit approval policies"),
        ]
        indexes = [
            # The dashboard's lists: newest first, optionally by status; keyset pagination
            # orders by (updated_at, id), so the indexes match that ORDER BY exactly.
            models.Index(fields=["project", "-updated_at", "-id"], name="saga_project_recent"),
            models.Index(
                fields=["project", "status", "-updated_at", "-id"], name="saga_project_status"
            ),
            models.Index(fields=["status", "-updated_at"], name="saga_status_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.saga_id})"


class Step(models.Model):
    saga = models.ForeignKey(Saga, on_delete=models.CASCADE, related_name="steps")
    step_id = models.CharField(max_length=100)
    position = models.IntegerField()
    tool_name = models.CharField(max_length=200)
    state = models.CharField(max_length=20, choices=[(s.value, s.value) for s in StepState])
    input = JSONTextField(null=True, blank=True)
    output = JSONTextField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    error_type = models.CharField(max_length=200, null=True, blank=True)
    traceback = models.TextField(null=True, blank=True)
    has_undo = models.BooleanField(default=True)
    requires_approval = models.BooleanField(default=False)
    reversibility = models.CharField(max_length=20, default="reversible")
    idempotency_key = models.CharField(max_length=250)
    undo = JSONTextField(default=dict)
    """How the undo runs: {"kind": "client"} for mirrored sagas; server kinds come later."""
    created_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(null=True, blank=True)
    decided_by = models.CharField(max_length=200, null=True, blank=True)
    metadata = JSONTextField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["saga", "step_id"], name="step_unique_per_saga")
        ]
        indexes = [
            models.Index(fields=["tool_name", "saga"], name="step_tool"),
            models.Index(fields=["state", "updated_at"], name="step_state_recent"),
        ]
        ordering = ["position"]

    def __str__(self) -> str:
        return f"{self.step_id} ({self.tool_name})"


class CompensationAttempt(models.Model):
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="attempts")
    number = models.IntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    actor = models.CharField(max_length=200, null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["step", "number"], name="attempt_unique_per_step")
        ]
        ordering = ["number"]


class Event(models.Model):
    """The append-only event log: every state change, ``id`` monotonic.

    Live views and the audit trail read from here; ``client_event_id`` makes an
    SDK retry idempotent and ``digest`` tells a retry from a different event
    that reuses its id.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="events")
    saga = models.ForeignKey(Saga, on_delete=models.CASCADE, related_name="events")
    seq = models.BigIntegerField()
    client_event_id = models.CharField(max_length=200)
    digest = models.CharField(max_length=64)
    kind = models.CharField(max_length=20)
    step_id = models.CharField(max_length=100, null=True, blank=True)
    tool_name = models.CharField(max_length=200, null=True, blank=True)
    from_state = models.CharField(max_length=20, null=True, blank=True)
    to_state = models.CharField(max_length=20)
    at = models.DateTimeField()
    actor = models.CharField(max_length=200, null=True, blank=True)
    detail = models.TextField(null=True, blank=True)
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["saga", "seq"], name="event_unique_seq"),
            models.UniqueConstraint(
                fields=["project", "client_event_id"], name="event_unique_client_id"
            ),
        ]
        indexes = [models.Index(fields=["project", "id"], name="event_project_cursor")]
        ordering = ["id"]


class AuditEntry(models.Model):
    """A human (or token) action: who, when, what, why. Never updated."""

    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=100)
    target = models.CharField(max_length=200, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    data = JSONTextField(default=dict)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["action", "at"], name="audit_action_at"),
            models.Index(fields=["actor", "at"], name="audit_actor_at"),
        ]
        ordering = ["-at"]


class ApiRequest(models.Model):
    """A manual-flow API call already served: a retry with its ``event_id`` gets the same answer."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_requests")
    event_id = models.CharField(max_length=200)
    digest = models.CharField(max_length=64)
    operation = models.CharField(max_length=50)
    saga_id = models.CharField(max_length=100)
    step_id = models.CharField(max_length=100, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "event_id"], name="api_request_unique")
        ]

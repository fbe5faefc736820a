"""What the system keeps about itself: the operators' audit trail, the notification
outbox, and the workers' heartbeats."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from sagaboard.models.fields import JSONTextField
from sagaboard.models.projects import Project


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


class Notification(models.Model):
    """An outgoing webhook (an outbox row): sent by a worker, signed, retried until delivered."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=40)
    payload = JSONTextField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["delivered_at", "next_attempt_at"], name="notify_due")]


class Heartbeat(models.Model):
    """A worker's sign of life, written every few seconds (``/healthz`` reads it)."""

    name = models.CharField(max_length=200, unique=True)
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.at:%H:%M:%S}"

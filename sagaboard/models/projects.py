"""Projects, their API tokens, and the API requests remembered for idempotency."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


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


class ApiTokenVersion(models.Model):
    """One row: a number every change to a token or a project moves (database triggers).

    Each web process keeps the tokens it has checked (``sagaboard.access.services.tokens``)
    and reads this number on every API request: one indexed read, and a revoked, rescoped
    or deleted token is refused on the very next request in every process, whoever changed
    it (the dashboard, a command, the admin, SQL by hand). "Last used" does not move it.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    number = models.BigIntegerField(default=0)


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

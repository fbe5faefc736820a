"""A person's saved list filters: a name for a list URL's query string."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from sagaboard.models.projects import Project


class SavedView(models.Model):
    """A named saga-list filter of one user; its URL is the list's with ``query`` after ``?``.

    ``project`` is the one project the filter chose (NULL: all the owner's projects). A
    shared view is offered to the other members of that project only, and whoever opens it
    sees only the sagas of their own projects: the list scopes every query to them.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_views"
    )
    name = models.CharField(max_length=100)
    query = models.TextField(max_length=2000, blank=True, default="")
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="saved_views"
    )
    shared = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], name="saved_view_unique_name"),
        ]
        indexes = [models.Index(fields=["project", "shared"], name="saved_view_shared")]
        ordering = ["name", "pk"]

    def __str__(self) -> str:
        return self.name

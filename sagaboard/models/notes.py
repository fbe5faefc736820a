"""Operators' notes on a saga or one of its steps, and each note's earlier texts.

A note is Markdown as its author wrote it (rendered escaped: ``ui.markdown_text``). An edit
keeps the text it replaces as a ``NoteRevision``; a deleted note keeps its row (and its
history) with ``deleted_at`` set, so the audit trail can always show what was said.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from sagaboard.models.projects import Project
from sagaboard.models.sagas import Saga, Step

NOTE_MAX = 10_000
"""The longest note body, in characters."""


class Note(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    saga = models.ForeignKey(Saga, on_delete=models.CASCADE, related_name="notes")
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.CASCADE, related_name="notes"
    )
    """The step the note is about (NULL: the saga as a whole)."""
    body = models.TextField(max_length=NOTE_MAX)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_name = models.CharField(max_length=200)
    """The author as records name people (``user:<name>``): kept if the account goes."""
    created_at = models.DateTimeField(default=timezone.now)
    edited_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    deleted_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["saga", "created_at"], name="note_saga_time")]
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return f"note {self.pk} on {self.saga_id}"


class NoteRevision(models.Model):
    """A text a note had before an edit: what it said, and who had written it when."""

    note = models.ForeignKey(Note, on_delete=models.CASCADE, related_name="revisions")
    body = models.TextField(max_length=NOTE_MAX)
    written_by = models.CharField(max_length=200)
    written_at = models.DateTimeField()
    replaced_by = models.CharField(max_length=200)
    replaced_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-replaced_at", "-pk"]

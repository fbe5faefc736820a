"""Deciding from elsewhere: personal decision links (e-mail) and Slack people and requests.

A link is kept only as the hash of its token (the token itself is in the person's mail,
minted when the mail is sent), with ``used_at`` for single use. A Slack request is kept
by its signature for the few minutes Slack's timestamp window lasts, so a replayed
request is refused.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from sagaboard.models.approvals import Approval


class DecisionLink(models.Model):
    """One person's single-use, expiring link to decide one approval."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="links")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="decision_links"
    )
    token_hash = models.CharField(max_length=64, blank=True, default="", db_index=True)
    """SHA-256 of the token last minted ("" before its mail is sent)."""
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"link for approval {self.approval_id} to user {self.user_id}"


class SlackIdentity(models.Model):
    """A Slack user who is a sagaboard user (linked by an admin: ``sagaboard_slack_link``)."""

    slack_user_id = models.CharField(max_length=64, unique=True)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_identity"
    )
    linked_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "Slack identities"

    def __str__(self) -> str:
        return f"{self.slack_user_id} is user {self.user_id}"


class SlackRequest(models.Model):
    """A Slack request already taken (by its signature): the same one again is a replay."""

    signature = models.CharField(max_length=100, unique=True)
    seen_at = models.DateTimeField(default=timezone.now, db_index=True)

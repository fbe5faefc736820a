"""Approvals: the policies that ask for a person, each undo's approval, and its votes."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from sagaboard.models.fields import (
    ApprovalStatus,
    JSONTextField,
    PolicyOnExpiry,
    VoteDecision,
    one_of,
)
from sagaboard.models.projects import Project
from sagaboard.models.sagas import Saga, Step
from undo_core import DecisionAction


class ApprovalPolicy(models.Model):
    """An admin's rule for which undos need a person, how many people, and for how long.

    Matched on the tool name (a glob) and an optional condition on the step's
    input or output (``input.amount > 100``, see ``sagaboard.approvals.services.conditions``).
    Editing a policy bumps ``version``; approvals keep the version they were
    created under, so a change applies only to approvals created after it.
    """

    OnExpiry = PolicyOnExpiry

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="policies")
    name = models.CharField(max_length=100)
    tool_glob = models.CharField(max_length=200, default="*")
    condition = models.CharField(max_length=300, blank=True, default="")
    approvers_required = models.PositiveSmallIntegerField(default=1)
    timeout_seconds = models.PositiveIntegerField(null=True, blank=True)
    on_expiry = models.CharField(max_length=10, choices=OnExpiry.choices, default=OnExpiry.WAIT)
    enabled = models.BooleanField(default=True)
    version = models.PositiveIntegerField(default=1)
    updated_by = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "approval policies"
        constraints = [one_of("policy", "on_expiry", PolicyOnExpiry.values)]
        ordering = ["project", "name"]

    def __str__(self) -> str:
        return f"{self.name} (v{self.version})"


class Approval(models.Model):
    """One undo waiting for (or past) a decision, bound to a hash of exactly what will run."""

    Status = ApprovalStatus

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="approvals")
    saga = models.ForeignKey(Saga, on_delete=models.CASCADE, related_name="approvals")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="approvals")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    required = models.PositiveSmallIntegerField(default=1)
    why = models.TextField()
    policy = models.ForeignKey(
        ApprovalPolicy, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    policy_snapshot = JSONTextField(default=dict)
    """The policy as it was when this approval was created (name, version, rule)."""
    plan = JSONTextField(default=dict)
    """Exactly what will run: handler and arguments, webhook URL and body, or the command."""
    plan_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_reason = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["step"],
                condition=models.Q(status="PENDING"),
                name="approval_one_pending_per_step",
            ),
            one_of("approval", "status", ApprovalStatus.values),
        ]
        indexes = [
            models.Index(fields=["project", "status", "created_at"], name="approval_queue"),
            models.Index(fields=["status", "expires_at"], name="approval_expiry"),
        ]

    def __str__(self) -> str:
        return f"approval {self.pk} ({self.status}) for {self.step_id}"

    @property
    def is_pending(self) -> bool:
        """It still waits for a decision (in the queue)."""
        return self.status == ApprovalStatus.PENDING

    @property
    def four_eyes(self) -> bool:
        """More than one person must approve it."""
        return self.required > 1


class ApprovalVote(models.Model):
    """One person's approve or reject, with the reason they were required to give."""

    Decision = VoteDecision

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="votes")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    decision = models.CharField(max_length=10, choices=Decision.choices)
    reason = models.TextField()
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["approval", "user"], name="vote_once_per_person"),
            one_of("vote", "decision", VoteDecision.values),
        ]
        ordering = ["at"]

    @property
    def decided(self) -> str:
        """The decision as a sentence says it ("approved by ann"): built from the verb with a
        "d" it read "rejectd"."""
        past: dict[str, str] = {
            DecisionAction.APPROVE: "approved",
            DecisionAction.REJECT: "rejected",
        }
        return past.get(self.decision, self.decision)

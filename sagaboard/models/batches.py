"""Batch operations: one operator action over every item a filter matched, run as a job.

A ``BatchJob`` is created when the operator confirms: the filter is stored as its query
string, and the items it matched (in the operator's projects) are frozen as ``BatchItem``
rows at that moment, so the job acts on exactly the count the confirm page showed. A
worker then processes the items in order, recording each one's outcome; an item with an
outcome is never processed again, which makes a job resumable after its worker died.
The lease (``lease_owner``, ``lease_expires_at``) says which worker holds the job now.

Making a request is not knowing its outcome: an item whose retry, resolve or approval was
accepted stays ``requested`` (still running) until the undo it started has ended, and the
job stays ``finishing`` until the last of them has (``sagaboard.actions.services.batch_outcomes``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from sagaboard.models.fields import JSONTextField, choices_of
from sagaboard.models.projects import Project
from undo_core import APPROVAL_DECISIONS, STEP_ACTIONS


class BatchJob(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        CANCELLING = "cancelling"
        FINISHING = "finishing"
        """Every request made (or the job cancelled): waiting for the undos they started."""
        CANCELLED = "cancelled"
        FINISHED = "finished"
        """Every item's outcome is known (a cancelled job: every outcome of what it did)."""

    Action = choices_of("BatchAction", (*STEP_ACTIONS, *APPROVAL_DECISIONS))
    """A batch does one step action or one approval decision (undo_core's vocabulary)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor = models.CharField(max_length=200)
    """Who confirmed it, as records name people (``user:<name>``): kept if the account goes."""
    action = models.CharField(max_length=20, choices=Action.choices)
    reason = models.TextField()
    query = models.TextField(blank=True, default="")
    """The filter as confirmed: the saga list's canonical query string."""
    projects = models.ManyToManyField(Project, related_name="+", blank=True)
    """The projects its items belong to (who may see the job)."""
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    """Items acted on: requests made (their outcomes may not be known yet)."""
    counts = JSONTextField(default=dict)
    """Items per outcome so far (``{"succeeded": 3, "refused": 1, "requested": 2}``)."""
    state = models.CharField(max_length=20, choices=State.choices, default=State.QUEUED)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    """When its worker last finished a chunk (a stalled job shows it)."""
    lease_owner = models.CharField(max_length=200, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["state", "created_at"], name="batch_state_time")]
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"batch #{self.pk} {self.action} ({self.state})"

    @property
    def ended(self) -> bool:
        """Nothing more will change: every outcome of what it did is known."""
        return self.state in (self.State.CANCELLED, self.State.FINISHED)

    @property
    def making_requests(self) -> bool:
        """Queued or running through its items (what Cancel can still stop)."""
        return self.state in (self.State.QUEUED, self.State.RUNNING, self.State.CANCELLING)

    @property
    def running(self) -> int:
        """Items whose request was made and whose undo has not ended yet."""
        return int(self.counts.get("requested", 0))

    @property
    def known(self) -> int:
        """Items whose outcome is known."""
        return self.done - self.running

    @property
    def percent(self) -> int:
        """Of the items, how many have a known outcome (not merely a request made)."""
        return 100 if not self.total else int(100 * self.known / self.total)


class BatchItem(models.Model):
    """One target of a batch job (a step or an approval) and what became of it."""

    class Kind(models.TextChoices):
        STEP = "step"
        APPROVAL = "approval"

    job = models.ForeignKey(BatchJob, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    target_pk = models.BigIntegerField()
    """The step's or approval's primary key (no foreign key: the record may be purged)."""
    project = models.ForeignKey(Project, null=True, on_delete=models.SET_NULL, related_name="+")
    label = models.CharField(max_length=500)
    """The target named for people: tool (step id) in saga name [saga id]."""
    outcome = models.CharField(max_length=20, blank=True, default="")
    """'' until processed; then a key of ``action_reports.RESULTS``: ``requested`` until the
    undo its request started has ended, then what that undo came to."""
    message = models.TextField(blank=True, default="")
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "position"], name="batch_item_position")
        ]
        indexes = [
            models.Index(fields=["job", "outcome", "position"], name="batch_item_outcome"),
            # The items still running on a step, found when its request is carried out.
            models.Index(
                fields=["target_pk"], condition=models.Q(outcome="requested"),
                name="batch_item_requested",
            ),
        ]  # fmt: skip

    def __str__(self) -> str:
        return f"{self.kind} {self.target_pk}: {self.outcome or 'pending'}"

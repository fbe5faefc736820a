"""Sagas, their steps, each undo attempt, and the event log every change is written to.

Sagas, steps and attempts mirror undo_core's records field for field; the transition
rules are undo_core's own (``engine.services.django_store`` and ``record.services.ingest``
call them), never a second copy here. Agent-supplied values are JSON *text*
(``fields.JSONTextField``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from sagaboard.infra import clock
from sagaboard.models.fields import JSONTextField, SagaDriver, one_of
from sagaboard.models.projects import Project
from undo_core import (
    STEP_TRANSITIONS,
    AttemptOutcome,
    Reversibility,
    RollbackOutcome,
    SagaStatus,
    StepState,
    WaitingFor,
    status_text,
    waiting_text,
)


def elapsed_ms(start: datetime, end: datetime) -> int:
    """Milliseconds from ``start`` to ``end`` (never negative): ``Saga.duration_ms``."""
    return max(0, (end - start) // timedelta(milliseconds=1))


class Saga(models.Model):
    """One saga; ``saga_id`` is undo_core's id, unique within its project."""

    Driver = SagaDriver

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="sagas")
    saga_id = models.CharField(max_length=100)
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=20, choices=[(s.value, s.value) for s in SagaStatus])
    driver = models.CharField(max_length=10, choices=Driver.choices, default=Driver.CLIENT)
    created_at = models.DateTimeField()
    """When the saga began, as its agent (or engine) reported it: shown, never trusted."""
    updated_at = models.DateTimeField()
    """When it last changed, as its agent (or engine) reported it: shown, never trusted."""
    received_at = models.DateTimeField(default=timezone.now)
    """When this server first stored the saga, by the server's own clock."""
    changed_at = models.DateTimeField(default=timezone.now)
    """When this server last stored a change to the saga or one of its steps (a transition
    from the agent, the engine or the manual-flow API), by the server's own clock.

    Lists, cursors, "updated in the last ...", charts, retention and sweeps read this,
    never ``updated_at``: an agent whose clock says 1970 or 9999 cannot hide a saga from
    retention's guard or pin it to the top of every list. Operators' requests and
    decisions are events of their own; what they lead the engine to do moves it.
    """
    duration_ms = models.BigIntegerField(default=0, db_default=0)
    """``changed_at - received_at`` in milliseconds, by the server's clock: how long the saga
    took (or, while it runs, had taken at its last change). Kept by every write that moves
    ``changed_at`` (``elapsed_ms``), so the list can sort by it through an index."""
    seq = models.BigIntegerField(default=0)
    next_step_number = models.IntegerField(default=1)
    options = JSONTextField(default=dict)
    state = JSONTextField(null=True, blank=True)
    failed_step = models.CharField(max_length=100, null=True, blank=True)
    lease_owner = models.CharField(max_length=200, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    posted_by_token = models.ForeignKey(
        "ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    """The token that posted the saga: neither it nor the person who made it may approve."""
    outcome = models.CharField(
        max_length=20, null=True, blank=True, choices=[(o.value, o.value) for o in RollbackOutcome]
    )
    """How its rollback came to rest (``undo_core.assess_rollback``); NULL while none has.

    Kept by every write path (``sagaboard.engine.reads.rollback_outcomes``), so lists can
    filter and count by it.
    """
    outcome_summary = models.CharField(max_length=200, blank=True, default="", db_default="")
    """The exceptions counted by kind, e.g. "1 rejected" ('' for none)."""
    waiting_for = models.CharField(
        max_length=10, null=True, blank=True, choices=[(w.value, w.value) for w in WaitingFor]
    )
    """Whom a rollback that cannot go on by itself waits for: an approver or an operator."""
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    """The person who took the saga on ("assigned to"), or NULL (``collab.services.ownership``)."""
    owner_since = models.DateTimeField(null=True, blank=True)
    rollback_requested_at = models.DateTimeField(null=True, blank=True)
    """When an operator asked for the rollback of this running saga
    (``actions.services.saga_stop``)."""
    rollback_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    rollback_request_reason = models.TextField(null=True, blank=True)
    rollback_request_heard_at = models.DateTimeField(null=True, blank=True)
    """When the agent's SDK was first told (an answer to its events, or its idle poll)."""
    rollback_request_overdue_at = models.DateTimeField(null=True, blank=True)
    """When the sweep found the request unheard past ``SAGABOARD_STOP_OVERDUE_SECONDS``."""
    rollback_request_done_at = models.DateTimeField(null=True, blank=True)
    """When the saga left IN_PROGRESS after the request: the request is closed."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "saga_id"], name="saga_unique_per_project"),
            one_of("saga", "status", SagaStatus),
            one_of("saga", "driver", SagaDriver.values),
            one_of("saga", "outcome", RollbackOutcome, null=True),
            one_of("saga", "waiting_for", WaitingFor, null=True),
        ]
        permissions = [
            ("retry_compensation", "Can retry a failed undo"),
            ("resolve_step", "Can force-resolve a failed undo"),
            ("decide_approval", "Can approve or reject an undo"),
            ("manage_policies", "Can edit approval policies"),
            ("collaborate", "Can write notes, assign sagas and acknowledge failures"),
            ("request_rollback", "Can request the rollback of a running saga"),
        ]
        indexes = [
            # The dashboard's lists: newest first, optionally by status; keyset pagination
            # orders by (changed_at, id), so the indexes match that ORDER BY exactly.
            models.Index(fields=["project", "-changed_at", "-id"], name="saga_project_recent"),
            models.Index(
                fields=["project", "status", "-changed_at", "-id"], name="saga_project_status"
            ),
            models.Index(fields=["status", "-changed_at"], name="saga_status_recent"),
            models.Index(
                fields=["project", "outcome", "-changed_at", "-id"], name="saga_project_outcome"
            ),
            models.Index(
                fields=["project", "waiting_for", "-changed_at", "-id"], name="saga_project_waiting"
            ),
            # The list's other sorts (``saga_search.SORTS``): started and duration.
            models.Index(fields=["project", "-received_at", "-id"], name="saga_project_started"),
            models.Index(fields=["project", "-duration_ms", "-id"], name="saga_project_duration"),
            models.Index(
                fields=["project", "owner", "-changed_at", "-id"], name="saga_project_owner"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.saga_id})"

    @property
    def clock_skew(self) -> clock.ClockSkew | None:
        """The agent's time furthest from the server's, when past ``SAGABOARD_CLOCK_SKEW``."""
        return clock.clock_skew(
            created_at=self.created_at,
            updated_at=self.updated_at,
            received_at=self.received_at,
            changed_at=self.changed_at,
        )

    @property
    def status_label(self) -> str:
        """The status as a person must read it: never a bare ROLLED_BACK with exceptions."""
        return status_text(self.status, self.outcome, self.outcome_summary)

    @property
    def status_badge(self) -> str:
        """The badge's text: the status, or "ROLLED BACK with exceptions (1 rejected)"."""
        if self.status == SagaStatus.ROLLBACK_FAILED:
            return self.status  # what it holds is said beside it (outcome_summary)
        return self.status_label

    @property
    def waiting_label(self) -> str:
        """'waiting for a person: ...' while its rollback cannot go on without one ('' if not)."""
        return waiting_text(self.waiting_for)

    @property
    def badge_css(self) -> str:
        """The badge's colour: a rollback with exceptions never looks like a clean one."""
        with_exceptions = self.outcome == RollbackOutcome.WITH_EXCEPTIONS
        if self.status == SagaStatus.ROLLED_BACK and with_exceptions:
            return "rolled_back_with_exceptions"
        return str(self.status).lower()

    @property
    def rollback_failed(self) -> bool:
        return self.status == SagaStatus.ROLLBACK_FAILED

    @property
    def outcome_note(self) -> str:
        """What a failed rollback holds ("1 undo failed"), said beside its bare badge ('' if
        not failed: a ROLLED BACK badge says it in its own text, see ``status_badge``)."""
        return self.outcome_summary if self.rollback_failed else ""

    @property
    def running(self) -> bool:
        """Still going (forward or rolling back): its duration is still growing."""
        return self.status in (SagaStatus.IN_PROGRESS, SagaStatus.COMPENSATING)

    @property
    def rollback_request_pending(self) -> bool:
        """An operator asked for the rollback and the saga has not left IN_PROGRESS yet."""
        return self.rollback_requested_at is not None and self.rollback_request_done_at is None

    @property
    def agent_driven(self) -> bool:
        """The agent runs it and reports its times (else sagaboard's engine records them)."""
        return self.driver == SagaDriver.CLIENT


OPERATOR_STATES = tuple(s for s in StepState if StepState.RESOLVED in STEP_TRANSITIONS[s])
"""Step states whose undo an operator settles (retry, resolve or leave): ROLLBACK_FAILED and
IN_DOUBT, those undo_core's table lets a person resolve by hand."""
DID_NOT_RUN = frozenset({StepState.PENDING, StepState.FAILED})
"""Step states whose action left nothing to undo (it never ran, or it failed)."""
FAILURE_STATES = frozenset({*OPERATOR_STATES, StepState.FAILED})
"""Step states whose ``error`` is the reason it stands there."""


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
    """How the undo runs: {"kind": "client"} for mirrored sagas, or one sagaboard runs
    itself ({"kind": "handler" | "webhook" | "command" | "none", ...}: ``undo_kinds``)."""
    created_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    """``created_at``, ``updated_at``, ``completed_at``: as the agent (or engine) reported them."""
    changed_at = models.DateTimeField(default=timezone.now)
    """When this server last stored a transition of the step, by its own clock: how long an
    undo has waited for a person is measured from here."""
    decision_note = models.TextField(null=True, blank=True)
    decided_by = models.CharField(max_length=200, null=True, blank=True)
    metadata = JSONTextField(default=dict)
    left_at = models.DateTimeField(null=True, blank=True)
    """Set when an operator chose to leave a failed undo as it is (off the attention list)."""
    left_by = models.CharField(max_length=200, null=True, blank=True)
    left_reason = models.TextField(null=True, blank=True)
    pending_action = JSONTextField(null=True, blank=True)
    """An operator's retry or resolve not yet carried out: {"action", "by", "reason", "at"}.

    Set by a conditional update (so a double click is refused), consumed by the
    worker for server-run sagas or by the agent's SDK for sagas it runs itself.
    """
    acknowledged_by = models.CharField(max_length=200, null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_change = models.DateTimeField(null=True, blank=True)
    """The step's ``changed_at`` when it was acknowledged: a later change (another failed
    attempt) is a new failure, which nobody has acknowledged yet."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["saga", "step_id"], name="step_unique_per_saga"),
            one_of("step", "state", StepState),
            one_of("step", "reversibility", Reversibility),
        ]
        indexes = [
            models.Index(fields=["tool_name", "saga"], name="step_tool"),
            models.Index(fields=["state", "changed_at"], name="step_state_recent"),
        ]
        ordering = ["position"]

    def __str__(self) -> str:
        return f"{self.step_id} ({self.tool_name})"

    @property
    def needs_operator(self) -> bool:
        """An operator's retry, resolve or leave is due: its undo failed or is in doubt, and
        nobody left it failed or asked for a retry or resolve not yet carried out (a retry
        that waits for its approval still lets an operator resolve or leave the step)."""
        if self.state not in OPERATOR_STATES or self.left_at is not None:
            return False
        return not self.pending_action or bool(self.retry_waits_for_approval)

    @property
    def retry_waits_for_approval(self) -> str:
        """Why the operator's pending retry waits for an approver ('' when it does not)."""
        request = self.pending_action or {}
        if request.get("action") != "retry" or not request.get("approval"):
            return ""
        return str(request.get("why") or "it needs approval")

    @property
    def acknowledged(self) -> bool:
        """Someone said "I am on it" about the failure the step shows now (``ownership``)."""
        return self.acknowledged_at is not None and self.acknowledged_change == self.changed_at

    @property
    def ran(self) -> bool:
        """Its action ran (or may have): a PENDING or FAILED step left no side effect."""
        return self.state not in DID_NOT_RUN

    @property
    def effect_stays(self) -> bool:
        """It ran and has no undo: its side effect stays whatever the rollback does."""
        return self.ran and not self.has_undo

    @property
    def error_is_current(self) -> bool:
        """Its error is why it stands where it is (failed, undo failed, in doubt), not an
        earlier attempt's that a retry has since overcome."""
        return self.state in FAILURE_STATES

    @property
    def fully_reversible(self) -> bool:
        return self.reversibility == Reversibility.REVERSIBLE


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
            models.UniqueConstraint(fields=["step", "number"], name="attempt_unique_per_step"),
            one_of("attempt", "outcome", AttemptOutcome, null=True),
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
    seq = models.BigIntegerField(null=True, blank=True)
    """The engine's per-saga sequence; NULL for an operator's event (a decision, an action)."""
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
    change = models.TextField(null=True, blank=True)
    """What the event changed, as accepted: the transition event's JSON (``saga``, ``step``,
    ``event``; ``undo`` for a server-run step's creation). Replaying a saga's changes in
    ``seq`` order through undo_core gives its stored record (``sagaboard_verify``). NULL
    for an operator's event, which changes no mirrored field, and for events logged
    before changes were kept."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["saga", "seq"], name="event_unique_seq"),
            models.UniqueConstraint(
                fields=["project", "client_event_id"], name="event_unique_client_id"
            ),
        ]
        indexes = [models.Index(fields=["project", "id"], name="event_project_cursor")]
        ordering = ["id"]

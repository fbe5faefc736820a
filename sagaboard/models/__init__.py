"""sagaboard's tables: projects and their tokens, sagas, steps, attempts, the event log, audit.

One module per aggregate (``projects``, ``sagas``, ``approvals``, ``records``), all in the
one app ``sagaboard``; import them from here. Agent-supplied values (inputs, outputs,
metadata, declarative state) are kept as JSON *text* (``fields.JSONTextField``): it
round-trips any JSON exactly on every database (PostgreSQL's jsonb would reject
``\\u0000`` and reorder keys). ``User`` and ``Viewer`` (``users``) type who acts.
"""

from sagaboard.models.approvals import Approval, ApprovalPolicy, ApprovalVote
from sagaboard.models.batches import BatchItem, BatchJob
from sagaboard.models.decision_links import DecisionLink, SlackIdentity, SlackRequest
from sagaboard.models.fields import (
    ApprovalStatus,
    JSONTextField,
    PolicyOnExpiry,
    SagaDriver,
    VoteDecision,
    one_of,
)
from sagaboard.models.notes import NOTE_MAX, Note, NoteRevision
from sagaboard.models.overview import SagaCount, SagaCountChange
from sagaboard.models.projects import ApiRequest, ApiToken, ApiTokenVersion, Project
from sagaboard.models.records import AuditChain, AuditEntry, Heartbeat, Notification
from sagaboard.models.sagas import OPERATOR_STATES, CompensationAttempt, Event, Saga, Step
from sagaboard.models.saved_views import SavedView
from sagaboard.models.tool_health import ToolRollup, ToolRollupCursor, ToolRollupMark
from sagaboard.models.users import User, Viewer

__all__ = [
    "NOTE_MAX",
    "OPERATOR_STATES",
    "ApiRequest",
    "ApiToken",
    "ApiTokenVersion",
    "Approval",
    "ApprovalPolicy",
    "ApprovalStatus",
    "ApprovalVote",
    "AuditChain",
    "AuditEntry",
    "BatchItem",
    "BatchJob",
    "CompensationAttempt",
    "DecisionLink",
    "Event",
    "Heartbeat",
    "JSONTextField",
    "Note",
    "NoteRevision",
    "Notification",
    "PolicyOnExpiry",
    "Project",
    "Saga",
    "SagaCount",
    "SagaCountChange",
    "SagaDriver",
    "SavedView",
    "SlackIdentity",
    "SlackRequest",
    "Step",
    "ToolRollup",
    "ToolRollupCursor",
    "ToolRollupMark",
    "User",
    "Viewer",
    "VoteDecision",
    "one_of",
]

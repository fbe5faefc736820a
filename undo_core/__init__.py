"""undo_core: a saga engine for AI agents' tool calls, framework-free.

Tools have an ``execute`` and an optional ``undo``; a :class:`Saga` runs them
as steps and, when one fails, undoes the completed ones newest first. A port
and superset of agent-undo (TypeScript) and Agent Saga: approval gates,
retry/resolve of failed undos, pluggable stores and crash recovery.

    >>> from undo_core import Saga, define_tool
    >>> add = define_tool("add", lambda x: x + 1, lambda out, x: None)
    >>> with Saga("demo") as saga:
    ...     saga.execute(add, 1)
    2
    >>> saga.status
    <SagaStatus.COMPLETED: 'COMPLETED'>
"""

from .engine.audit import AuditRecord, AuditSink, Severity, audit_listener
from .engine.core import CompensationFailureMode, Listener
from .engine.declarative import RunResult, SagaDefinition, SagaStep, define_saga
from .engine.ledger import default_owner, local_owner_dead, owner_is_gone
from .engine.recovery import RecoveryResult, arecover, attach, recover
from .engine.reports import RollbackReport
from .engine.saga import AsyncSaga, Saga
from .engine.wrap import WrappedTools, wrap_tools
from .stores.rules import StepView, check_change, is_unsettled, replay
from .stores.sqlite_store import SQLiteStore
from .stores.storage import MemoryStore, RollbackRequest, RollbackRequests, SagaChange, SagaStore
from .vocabulary.clock import Clock, SystemClock
from .vocabulary.errors import (
    ChangeRefused,
    GateError,
    LeaseError,
    RollbackRequestedError,
    SagaClosedError,
    SagaDefinitionError,
    SagaNotFoundError,
    SagaRollbackError,
    SerializationError,
    StepNotFoundError,
    StepTimeoutError,
    StoreError,
    ToolDefinitionError,
    TransitionError,
    UndoCoreError,
)
from .vocabulary.gates import (
    APPROVAL_DECISIONS,
    CARRIED_OUT,
    STEP_ACTIONS,
    ApprovalGate,
    ApprovalPolicy,
    ApprovalRequest,
    ApprovalScreen,
    AsyncApprovalGate,
    AutoApproveGate,
    Decision,
    DecisionAction,
    FailedCompensation,
)
from .vocabulary.outcome import (
    ExceptionKind,
    RollbackAssessment,
    RollbackException,
    RollbackOutcome,
    StepFacts,
    WaitingFor,
    assess_rollback,
    status_text,
    waiting_text,
)
from .vocabulary.policies import RetryPolicy
from .vocabulary.records import (
    AttemptOutcome,
    CompensationAttempt,
    EventKind,
    SagaEvent,
    SagaRecord,
    SagaSnapshot,
    StepSnapshot,
    UndoKind,
)
from .vocabulary.states import SAGA_TRANSITIONS, STEP_TRANSITIONS, SagaStatus, StepState
from .vocabulary.tools import ExecuteContext, Reversibility, Tool, UndoContext, define_tool

__version__ = "0.1.0"

__all__ = [
    "APPROVAL_DECISIONS",
    "CARRIED_OUT",
    "SAGA_TRANSITIONS",
    "STEP_ACTIONS",
    "STEP_TRANSITIONS",
    "ApprovalGate",
    "ApprovalPolicy",
    "ApprovalRequest",
    "ApprovalScreen",
    "AsyncApprovalGate",
    "AsyncSaga",
    "AttemptOutcome",
    "AuditRecord",
    "AuditSink",
    "AutoApproveGate",
    "ChangeRefused",
    "Clock",
    "CompensationAttempt",
    "CompensationFailureMode",
    "Decision",
    "DecisionAction",
    "EventKind",
    "ExceptionKind",
    "ExecuteContext",
    "FailedCompensation",
    "GateError",
    "LeaseError",
    "Listener",
    "MemoryStore",
    "RecoveryResult",
    "RetryPolicy",
    "Reversibility",
    "RollbackAssessment",
    "RollbackException",
    "RollbackOutcome",
    "RollbackReport",
    "RollbackRequest",
    "RollbackRequestedError",
    "RollbackRequests",
    "RunResult",
    "SQLiteStore",
    "Saga",
    "SagaChange",
    "SagaClosedError",
    "SagaDefinition",
    "SagaDefinitionError",
    "SagaEvent",
    "SagaNotFoundError",
    "SagaRecord",
    "SagaRollbackError",
    "SagaSnapshot",
    "SagaStatus",
    "SagaStep",
    "SagaStore",
    "SerializationError",
    "Severity",
    "StepFacts",
    "StepNotFoundError",
    "StepSnapshot",
    "StepState",
    "StepTimeoutError",
    "StepView",
    "StoreError",
    "SystemClock",
    "Tool",
    "ToolDefinitionError",
    "TransitionError",
    "UndoContext",
    "UndoCoreError",
    "UndoKind",
    "WaitingFor",
    "WrappedTools",
    "__version__",
    "arecover",
    "assess_rollback",
    "attach",
    "audit_listener",
    "check_change",
    "default_owner",
    "define_saga",
    "define_tool",
    "is_unsettled",
    "local_owner_dead",
    "owner_is_gone",
    "recover",
    "replay",
    "status_text",
    "waiting_text",
    "wrap_tools",
]

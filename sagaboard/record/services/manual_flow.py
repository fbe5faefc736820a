"""Sagas driven by hand over the API (the seed's MCP tools): begin, add, complete, fail, roll back.

Each call restores the saga from ``DjangoStore`` into undo_core's engine, makes
one move with the engine's own rules, and lets go of it; the whole call is one
transaction and is recorded under the client's ``event_id`` so that a retry
answers the same without doing it twice.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from django.db import IntegrityError, transaction

from sagaboard.engine.services import undo_kinds
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.errors import ServiceError
from sagaboard.infra import jobs
from sagaboard.infra.http import limits
from sagaboard.models import ApiRequest, Project, Saga
from undo_core import (
    LeaseError,
    SagaNotFoundError,
    StepNotFoundError,
    Tool,
    TransitionError,
    define_tool,
    tracing,
)
from undo_core import Saga as EngineSaga


def _not_here(*args: Any) -> Any:
    raise RuntimeError("this tool ran in the agent; sagaboard only records it")


def _tool(name: str, undo_kind: str, reversibility: str = "reversible") -> Tool:
    # The undo itself runs elsewhere (the agent, or a worker for server-side kinds);
    # the engine needs to know only whether there is one.
    undo = None if undo_kind == "none" else _not_here
    return define_tool(name, _not_here, undo, reversibility=reversibility)


def _tools(saga: Saga) -> dict[str, Tool]:
    return {
        s.tool_name: _tool(s.tool_name, (s.undo or {}).get("kind", "none"))
        for s in saga.steps.all()
    }


def _digest(operation: str, payload: dict[str, Any]) -> str:
    raw = json.dumps([operation, payload], sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()


@contextmanager
def _engine(project: Project, saga_id: str) -> Iterator[EngineSaga]:
    """The saga restored into the engine under a one-call lease, released afterwards."""
    row = Saga.objects.select_for_update().filter(project=project, saga_id=saga_id).first()
    if row is None:
        raise ServiceError(404, "not_found", f"no saga {saga_id!r} in this project")
    if row.driver != Saga.Driver.SERVER:
        raise ServiceError(
            409, "conflict", f"saga {saga_id!r} is run by its agent; send transition events"
        )
    try:
        saga = EngineSaga.restore(
            DjangoStore(project), saga_id, _tools(row), owner=f"api:{uuid.uuid4().hex[:12]}"
        )
    except (LeaseError, SagaNotFoundError) as err:
        raise ServiceError(409, "busy", f"saga {saga_id!r} is being changed: {err}") from err
    try:
        yield saga
    finally:
        saga.release()


def _once(
    project: Project,
    event_id: str,
    operation: str,
    payload: dict[str, Any],
    saga_id: str,
    act: Callable[[], str | None],
) -> tuple[str, str | None, bool]:
    """Run ``act`` once per ``event_id``: returns (saga_id, step_id, replayed)."""
    digest = _digest(operation, payload)
    seen = ApiRequest.objects.filter(project=project, event_id=event_id).first()
    if seen is not None:
        # The same event_id on another saga is another request, not a retry (a begin
        # without an id gets a fresh one each time: its digest alone decides).
        other_saga = operation != "saga.begin" and seen.saga_id != saga_id
        if seen.digest != digest or other_saga:
            raise ServiceError(
                409, "conflict", f"event_id {event_id!r} was used for another request", "event_id"
            )
        return seen.saga_id, seen.step_id, True
    try:
        with transaction.atomic():
            step_id = act()
            ApiRequest.objects.create(
                project=project,
                event_id=event_id,
                digest=digest,
                operation=operation,
                saga_id=saga_id,
                step_id=step_id,
            )
    except TransitionError as err:
        raise ServiceError(409, "illegal_transition", str(err)) from err
    except StepNotFoundError as err:
        raise ServiceError(404, "not_found", str(err), "step_id") from err
    except IntegrityError as err:
        raise ServiceError(409, "conflict", f"a concurrent request won: {err}") from err
    return saga_id, step_id, False


def saga_begin(
    *,
    project: Project,
    event_id: str,
    name: str,
    saga_id: str | None = None,
    on_compensation_failure: Literal["continue", "halt"] = "halt",
    actor: str | None = None,
    token_pk: int | None = None,
) -> str:
    """Create a server-driven saga (IN_PROGRESS, no steps); returns its id."""
    sid = saga_id or str(uuid.uuid4())
    payload = {"name": name, "id": saga_id, "ocf": on_compensation_failure}

    def act() -> None:
        if Saga.objects.filter(project=project, saga_id=sid).exists():
            raise ServiceError(409, "conflict", f"saga {sid!r} already exists", "id")
        saga = EngineSaga(
            name,
            saga_id=sid,
            store=DjangoStore(project),
            on_compensation_failure=on_compensation_failure,
            actor=actor,
            owner=f"api:{uuid.uuid4().hex[:12]}",
        )
        saga.start()
        saga.release()
        Saga.objects.filter(project=project, saga_id=sid).update(posted_by_token_id=token_pk)

    return _once(project, event_id, "saga.begin", payload, sid, act)[0]


def step_add(
    *,
    project: Project,
    event_id: str,
    saga_id: str,
    tool_name: str,
    input: Any,
    undo: dict[str, Any],
    requires_approval: bool = False,
    reversibility: str = "reversible",
    traceparent: str | None = None,
) -> str:
    """Register a PENDING step; returns its id (``step-N``).

    ``traceparent`` (the agent's span for this step, W3C) is kept in the step's metadata,
    where the worker's undo attempt finds its parent span (``undo_core.tracing``).

    An undo that cannot run here (``undo_kinds.undo_check``: a 'client' undo, a handler
    nobody registered, command undos switched off...) is refused with 422 naming why
    and the field. A shell-command undo always needs approval: it is text an agent sent.
    """
    payload = {"tool": tool_name, "input": input, "undo": undo, "ra": requires_approval}
    if traceparent is not None:
        payload["tp"] = traceparent
    check = undo_kinds.undo_check(Saga.Driver.SERVER, undo)  # type: ignore[arg-type]  # a str
    if not check:  # refused now, not when a rollback needs it and it fails at once
        message = check.why if check.code == "validation_error" else f"{check.field}: {check.why}"
        raise ServiceError(422, check.code, message, check.field)

    def act() -> str:
        with _engine(project, saga_id) as saga:
            _check_step_count(len(saga.steps))
            store = saga.store
            assert isinstance(store, DjangoStore)
            store.new_step_undo = undo  # stored with the step, and in its creation event
            step_id = saga.add_step(
                _tool(tool_name, undo.get("kind", "none"), reversibility),
                input,
                requires_approval=requires_approval or undo.get("kind") == "command",
                metadata={tracing.METADATA_KEY: traceparent} if traceparent else None,
            )
        return step_id

    return _once(project, event_id, "step.add", payload, saga_id, act)[1] or ""


def _check_step_count(count: int) -> None:
    if count >= limits.max_steps():
        raise ServiceError(
            422,
            "limit_exceeded",
            f"a saga has at most {limits.max_steps()} steps (SAGABOARD_MAX_STEPS)",
            "saga_id",
        )


def step_complete(
    *, project: Project, event_id: str, saga_id: str, step_id: str, output: Any
) -> None:
    def act() -> str:
        with _engine(project, saga_id) as saga:
            saga.mark_completed(step_id, output)
        return step_id

    _once(project, event_id, "step.complete", {"s": step_id, "o": output}, saga_id, act)


def step_fail(*, project: Project, event_id: str, saga_id: str, step_id: str, error: str) -> None:
    def act() -> str:
        with _engine(project, saga_id) as saga:
            saga.mark_failed(step_id, error)
        return step_id

    _once(project, event_id, "step.fail", {"s": step_id, "e": error}, saga_id, act)


def saga_complete(*, project: Project, event_id: str, saga_id: str) -> None:
    def act() -> None:
        with _engine(project, saga_id) as saga:
            saga.complete()

    _once(project, event_id, "saga.complete", {}, saga_id, act)


def saga_rollback_request(
    *, project: Project, event_id: str, saga_id: str, reason: str | None, actor: str | None
) -> None:
    """Ask for a rollback: the saga becomes COMPENSATING; workers run the undos.

    Steps never marked completed are failed first, as the engine does for any
    rollback. Compensations themselves run in a worker (``sagaboard.actions.services.runner``),
    each under its own approval rules, once this transaction has committed.
    """

    def act() -> None:
        with _engine(project, saga_id) as saga:
            saga.begin_rollback(actor=actor)
        pk = Saga.objects.values_list("pk", flat=True).get(project=project, saga_id=saga_id)
        jobs.rollback_continue(pk)

    _once(project, event_id, "saga.rollback", {"reason": reason}, saga_id, act)

"""Shared setup for the human-in-the-loop tests: people with roles, a server-run StoreBot saga."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from sagaboard import sagas
from sagaboard.models import Project, Saga, Step


def person(name: str, role: str, *projects: Project) -> Any:
    user = get_user_model().objects.create_user(name, password=f"pw-{name}-123456")
    user.groups.add(Group.objects.get(name=role))
    for project in projects:
        project.members.add(user)
    return user


def _eid() -> str:
    return uuid.uuid4().hex


def storebot_server_saga(
    project: Project,
    saga_id: str = "storebot-1",
    *,
    refund_needs_approval: bool = True,
    return_fails_first: int = 0,
    token_pk: int | None = None,
) -> Saga:
    """StoreBot run by sagaboard: return_item, refund_payment, then generate_label fails.

    The rollback is requested (saga COMPENSATING); a worker runs it from here.
    """
    sagas.saga_begin(
        project=project, event_id=_eid(), name="storebot-return", saga_id=saga_id,
        token_pk=token_pk,
    )  # fmt: skip
    steps = [
        ("return_item", {"order": "A-17"}, {"rma": "RMA-882"},
         {"kind": "handler", "handler": "storebot.return_item",
          "args": {"fail_first": return_fails_first}}, False),
        ("refund_payment", {"amount": 120, "currency": "EUR"}, {"refund": "re_1"},
         {"kind": "handler", "handler": "storebot.refund_payment"}, refund_needs_approval),
    ]  # fmt: skip
    for tool, given, output, undo, approval in steps:
        step_id = sagas.step_add(
            project=project, event_id=_eid(), saga_id=saga_id, tool_name=tool, input=given,
            undo=undo, requires_approval=approval,
        )  # fmt: skip
        sagas.step_complete(
            project=project, event_id=_eid(), saga_id=saga_id, step_id=step_id, output=output
        )
    label = sagas.step_add(
        project=project, event_id=_eid(), saga_id=saga_id, tool_name="generate_label",
        input={}, undo={"kind": "none"},
    )  # fmt: skip
    sagas.step_fail(
        project=project, event_id=_eid(), saga_id=saga_id, step_id=label,
        error="FedEx API returned 500",
    )  # fmt: skip
    sagas.saga_rollback_request(
        project=project, event_id=_eid(), saga_id=saga_id, reason="label failed", actor=None
    )
    return Saga.objects.get(project=project, saga_id=saga_id)


def states(saga: Saga) -> dict[str, str]:
    return {s.tool_name: s.state for s in Step.objects.filter(saga=saga)}

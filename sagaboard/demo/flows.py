"""Demo data: the seed's StoreBot and checkout flows, run through the real engine.

Each saga runs in undo_core with ``DjangoStore``, so what the dashboard shows is
exactly what the engine records: a clean rollback, a completed checkout, a
rollback that failed and waits for an operator, an undo an approver rejected,
one still running, and two that sagaboard runs itself (server-side undos): one
waiting in the approval queue, one whose undo failed. Saga ids are fixed, so
loading twice adds nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from sagaboard.domain import manual_flow, runner
from sagaboard.domain.django_store import DjangoStore
from sagaboard.models import Project, Saga
from undo_core import ApprovalRequest, Decision, FailedCompensation, SagaRollbackError, define_tool
from undo_core import Saga as EngineSaga

DEMO_PROJECT = "demo"
DEMO_COMPENSATIONS = "sagaboard.demo.compensations"
"""The module of the demo's server-side undos: registered only where the demo runs
(``SAGABOARD_COMPENSATION_MODULES``, by default with DEBUG on), never in production."""


def _fails(message: str) -> Callable[..., Any]:
    def fail(*args: Any) -> Any:
        raise ConnectionError(message)

    return fail


def _noop(*args: Any) -> None:
    return None


# Each tool answers about what it was given (the item returned is the item asked for, the
# refund is of the charge given), so every demo saga's outputs agree with its inputs.
def _returned(inp: dict[str, Any]) -> dict[str, Any]:
    return {"itemId": inp["itemId"], "status": "returned"}


def _refunded(inp: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"re_{inp['chargeId'].removeprefix('ch_')}", **inp}


def _reserved(inp: dict[str, Any]) -> dict[str, Any]:
    return {"sku": inp["sku"], "qty": inp["qty"], "reserved": True}


def _charged(inp: dict[str, Any]) -> dict[str, Any]:
    return {"charge": f"ch_{inp['customerId'].removeprefix('cus_')}", **inp}


def _emailed(inp: dict[str, Any]) -> dict[str, Any]:
    return {"to": inp["to"], "sent": True}


RETURN_ITEM = define_tool("return_item", _returned, _noop)
REFUND = define_tool("refund_payment", _refunded, _noop)
REFUND_STUCK = define_tool("refund_payment", _refunded, _fails("Stripe API timed out"))
REFUND_GATED = define_tool("refund_payment", _refunded, _noop, requires_approval=True)
LABEL_DOWN = define_tool("generate_label", _fails("FedEx API returned 500"))
RESERVE = define_tool("deduct_inventory", _reserved, _noop)
CHARGE = define_tool("charge_customer", _charged, _noop)
EMAIL = define_tool("send_email", _emailed)


def _return(item: str, amount: int, refund: Any = REFUND) -> list[tuple[Any, Any]]:
    """StoreBot's return of ``item``: the item, the refund of its charge, its order's label."""
    return [
        (RETURN_ITEM, {"itemId": item}),
        (refund, {"chargeId": f"ch_{item}", "amount": amount}),
        (LABEL_DOWN, {"orderId": f"o-{item}"}),
    ]


class _Approver:
    """A demo approver who refuses to cancel refunds."""

    def approve_compensation(self, request: ApprovalRequest) -> Decision:
        return Decision.reject("refund stands: goodwill gesture", actor="demo-approver")

    def compensation_failed(self, request: FailedCompensation) -> Decision:
        return Decision.leave()


def _run(
    project: Project,
    saga_id: str,
    name: str,
    steps: list[tuple[Any, Any]],
    *,
    complete: bool = True,
    **options: Any,
) -> None:
    if Saga.objects.filter(project=project, saga_id=saga_id).exists():
        return
    saga = EngineSaga(name, saga_id=saga_id, store=DjangoStore(project), **options)
    try:
        for tool, inp in steps:
            saga.execute(tool, inp)
    except SagaRollbackError:
        return
    if complete:
        saga.complete()
    else:
        saga.release()


@transaction.atomic
def demo_load() -> Project:
    """Create (once) the demo project and its sagas; returns the project."""
    project, _ = Project.objects.get_or_create(slug=DEMO_PROJECT, defaults={"name": "Demo shop"})
    _run(project, "demo-storebot-return", "storebot-return", _return("882", 4000))
    _run(
        project,
        "demo-checkout-ok",
        "checkout-flow",
        [
            (RESERVE, {"sku": "abc", "qty": 1}),
            (CHARGE, {"customerId": "cus_1", "amount": 2999}),
            (EMAIL, {"to": "ada@example.com"}),
        ],
    )
    stuck = _return("913", 12900, REFUND_STUCK)
    _run(project, "demo-refund-stuck", "storebot-return", stuck, on_compensation_failure="halt")
    rejected = _return("774", 25000, REFUND_GATED)
    _run(project, "demo-refund-rejected", "storebot-return", rejected, gate=_Approver())
    _run(
        project,
        "demo-checkout-running",
        "checkout-flow",
        [(RESERVE, {"sku": "xyz", "qty": 2})],
        complete=False,
    )
    if not Saga.objects.filter(project=project, saga_id="demo-refund-awaiting").exists():
        # Run by sagaboard itself: the worker's rollback stops before the refund's undo,
        # which waits in the approval queue.
        saga = storebot_server_saga(project, "demo-refund-awaiting", item="561")
        runner.rollback_continue(saga.pk)
    if not Saga.objects.filter(project=project, saga_id="demo-return-failing").exists():
        # The return's undo fails twice: ROLLBACK_FAILED, on the needs-attention page.
        saga = storebot_server_saga(
            project, "demo-return-failing", refund_needs_approval=False, return_fails_first=2,
            item="347",
        )  # fmt: skip
        runner.rollback_continue(saga.pk)
    return project  # fmt: skip


def _event_id() -> str:
    return uuid.uuid4().hex


def storebot_server_saga(
    project: Project,
    saga_id: str = "storebot-1",
    *,
    refund_needs_approval: bool = True,
    return_fails_first: int = 0,
    token_pk: int | None = None,
    item: str = "882",
) -> Saga:
    """StoreBot run by sagaboard: return_item, refund_payment, then generate_label fails.

    The return of ``item``: each step's output is about its input (the item returned, the
    refund of that item's charge, the label of its order). The rollback is requested
    (saga COMPENSATING); a worker runs it from here.
    """
    manual_flow.saga_begin(
        project=project, event_id=_event_id(), name="storebot-return", saga_id=saga_id,
        token_pk=token_pk,
    )  # fmt: skip
    charge = {"chargeId": f"ch_{item}", "amount": 120, "currency": "EUR"}
    returned = {"itemId": item, "status": "returned", "rma": f"RMA-{item}"}
    steps = [
        ("return_item", {"itemId": item}, returned,
         {"kind": "handler", "handler": "storebot.return_item",
          "args": {"fail_first": return_fails_first}}, False),
        ("refund_payment", charge, {"refund": f"re_{item}", **charge},
         {"kind": "handler", "handler": "storebot.refund_payment"}, refund_needs_approval),
    ]  # fmt: skip
    for tool, given, output, undo, approval in steps:
        step_id = manual_flow.step_add(
            project=project, event_id=_event_id(), saga_id=saga_id, tool_name=tool, input=given,
            undo=undo, requires_approval=approval,
        )  # fmt: skip
        manual_flow.step_complete(
            project=project, event_id=_event_id(), saga_id=saga_id, step_id=step_id, output=output
        )
    label = manual_flow.step_add(
        project=project, event_id=_event_id(), saga_id=saga_id, tool_name="generate_label",
        input={"orderId": f"o-{item}"}, undo={"kind": "none"},
    )  # fmt: skip
    manual_flow.step_fail(
        project=project, event_id=_event_id(), saga_id=saga_id, step_id=label,
        error="FedEx API returned 500",
    )  # fmt: skip
    manual_flow.saga_rollback_request(
        project=project, event_id=_event_id(), saga_id=saga_id, reason="label failed", actor=None
    )
    return Saga.objects.get(project=project, saga_id=saga_id)


def demo_user(username: str = "demo", password: str = "demo") -> tuple[Any, bool]:
    """The demo login (a superuser, for local use only); returns (user, created)."""
    User = get_user_model()
    user = User.objects.filter(username=username).first()
    created = user is None
    if user is None:
        user = User.objects.create_superuser(username, f"{username}@example.com", password)
    Project.objects.get(slug=DEMO_PROJECT).members.add(user)
    return user, created

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

from sagaboard import runner, sagas
from sagaboard.models import Project, Saga
from sagaboard.storage import DjangoStore
from undo_core import ApprovalRequest, Decision, FailedCompensation, SagaRollbackError, define_tool
from undo_core import Saga as EngineSaga

DEMO_PROJECT = "demo"


def _ok(result: Any) -> Callable[[Any], Any]:
    return lambda inp: result


def _fails(message: str) -> Callable[..., Any]:
    def fail(*args: Any) -> Any:
        raise ConnectionError(message)

    return fail


def _noop(*args: Any) -> None:
    return None


RETURN_ITEM = define_tool("return_item", _ok({"item": "882", "status": "returned"}), _noop)
REFUND = define_tool("refund_payment", _ok({"id": "re_1", "amount": 4000}), _noop)
REFUND_STUCK = define_tool(
    "refund_payment", _ok({"id": "re_7", "amount": 12900}), _fails("Stripe API timed out")
)
REFUND_GATED = define_tool(
    "refund_payment", _ok({"id": "re_9", "amount": 25000}), _noop, requires_approval=True
)
LABEL_DOWN = define_tool("generate_label", _fails("FedEx API returned 500"))
RESERVE = define_tool("deduct_inventory", _ok({"sku": "abc", "qty": 1}), _noop)
CHARGE = define_tool("charge_customer", _ok({"charge": "ch_123", "amount": 2999}), _noop)
EMAIL = define_tool("send_email", _ok({"sent": True}))


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
    order = {"orderId": "o-1001"}
    _run(
        project,
        "demo-storebot-return",
        "storebot-return",
        [(RETURN_ITEM, {"itemId": "882"}), (REFUND, {"chargeId": "ch_882"}), (LABEL_DOWN, order)],
    )
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
    _run(
        project,
        "demo-refund-stuck",
        "storebot-return",
        [
            (RETURN_ITEM, {"itemId": "913"}),
            (REFUND_STUCK, {"chargeId": "ch_913"}),
            (LABEL_DOWN, order),
        ],
        on_compensation_failure="halt",
    )
    _run(
        project,
        "demo-refund-rejected",
        "storebot-return",
        [
            (RETURN_ITEM, {"itemId": "774"}),
            (REFUND_GATED, {"chargeId": "ch_774"}),
            (LABEL_DOWN, order),
        ],
        gate=_Approver(),
    )
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
        saga = storebot_server_saga(project, "demo-refund-awaiting")
        runner.rollback_continue(saga.pk)
    if not Saga.objects.filter(project=project, saga_id="demo-return-failing").exists():
        # The return's undo fails twice: ROLLBACK_FAILED, on the needs-attention page.
        saga = storebot_server_saga(
            project, "demo-return-failing", refund_needs_approval=False, return_fails_first=2
        )
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
) -> Saga:
    """StoreBot run by sagaboard: return_item, refund_payment, then generate_label fails.

    The rollback is requested (saga COMPENSATING); a worker runs it from here.
    """
    sagas.saga_begin(
        project=project, event_id=_event_id(), name="storebot-return", saga_id=saga_id,
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
            project=project, event_id=_event_id(), saga_id=saga_id, tool_name=tool, input=given,
            undo=undo, requires_approval=approval,
        )  # fmt: skip
        sagas.step_complete(
            project=project, event_id=_event_id(), saga_id=saga_id, step_id=step_id, output=output
        )
    label = sagas.step_add(
        project=project, event_id=_event_id(), saga_id=saga_id, tool_name="generate_label",
        input={}, undo={"kind": "none"},
    )  # fmt: skip
    sagas.step_fail(
        project=project, event_id=_event_id(), saga_id=saga_id, step_id=label,
        error="FedEx API returned 500",
    )  # fmt: skip
    sagas.saga_rollback_request(
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

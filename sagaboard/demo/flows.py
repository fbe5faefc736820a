"""Demo data: the seed's StoreBot and checkout flows, run through the real engine.

Each saga runs in undo_core with ``DjangoStore``, so what the dashboard shows is
exactly what the engine records: a clean rollback, a completed checkout, a
rollback that failed and waits for an operator, an undo an approver rejected,
one still running, and some that sagaboard runs itself (server-side undos): four
waiting in the approval queue, one whose undo failed.

Every flow can be tried by hand: the demo's people (``DEMO_PEOPLE``: an operator, two
approvers, a viewer, beside the ``demo`` superuser) and three of the waiting undos
posted by StoreBot's token, which ``demo`` made, so its approvals are refused (four
eyes) while the approvers approve, reject or bulk-approve them; one of the three falls
under a two-approver policy (``TWO_APPROVERS``). The demo agent
(``sagaboard.demo.agent``) adds a saga that is really running. Saga ids, the people,
the token and the policy are fixed, so loading twice adds nothing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import get_hashers, make_password
from django.contrib.auth.models import Group, Permission
from django.db import transaction

from sagaboard.access.services.roles import roles_sync
from sagaboard.access.services.tokens import token_authenticate, token_create
from sagaboard.actions.services import runner
from sagaboard.approvals.services.policies import policy_save
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.models import ApiToken, ApprovalPolicy, Project, Saga
from sagaboard.record.services import manual_flow
from undo_core import ApprovalRequest, Decision, FailedCompensation, SagaRollbackError, define_tool
from undo_core import Saga as EngineSaga

DEMO_PROJECT = "demo"
DEMO_COMPENSATIONS = "sagaboard.demo.compensations"
"""The module of the demo's server-side undos: registered only where the demo runs
(``SAGABOARD_COMPENSATION_MODULES``, by default with DEBUG on), never in production."""
STOREBOT_TOKEN = "storebot"
"""The label of the API token the demo's queued refunds were posted with (made by ``demo``)."""
TWO_APPROVERS = "refunds over 1,000: two approvers"
"""The demo's policy: a refund's undo above 1,000 needs two different approvers."""
AGENT_TOKEN = "demo agent"
"""The label of the demo agent's API token (``demo_agent_token``)."""


@dataclass(frozen=True)
class DemoPerson:
    username: str
    password: str
    role: str
    tries: str
    """What this login is for in the demo (the command's output and the README say it)."""


DEMO_PEOPLE = (
    DemoPerson("olga", "olga-demo", "operator",
               "stop the demo agent's running checkout; retry or resolve a failed undo"),
    DemoPerson("anna", "anna-demo", "approver",
               "approve, reject or bulk-approve the queued refunds; first of two on the big one"),
    DemoPerson("amir", "amir-demo", "approver",
               "the same; the second approver demo-refund-two-approvers needs"),
    DemoPerson("vic", "vic-demo", "viewer", "sees everything, may change nothing"),
)  # fmt: skip
"""The demo's people, members of the demo project, one role each
(``sagaboard.access.services.roles``).
Their passwords pass the project's password validators (``demo``'s own does not)."""


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


def demo_project() -> Project:
    project, _ = Project.objects.get_or_create(slug=DEMO_PROJECT, defaults={"name": "Demo shop"})
    return project


@transaction.atomic
def demo_load(token_maker: Any = None) -> Project:
    """Create (once) the demo project and its sagas; returns the project.

    ``token_maker``: who made StoreBot's token (the demo superuser), so who may not
    decide the undos of the sagas posted with it.
    """
    project = demo_project()
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
    rejected = _return("774", 25000, REFUND_GATED)
    _run(project, "demo-refund-rejected", "storebot-return", rejected, gate=_Approver())
    if not Saga.objects.filter(project=project, saga_id="demo-checkout-running").exists():
        _running_checkout(project, "demo-checkout-running")
    if not Saga.objects.filter(project=project, saga_id="demo-refund-stuck").exists():
        # Stripe is down: the refund's undo fails at every attempt, and the rollback halts
        # before the return (not undone yet). Refund by hand and force-resolve it: the
        # worker then undoes the return, and the saga ends rolled back.
        saga = storebot_server_saga(
            project, "demo-refund-stuck", refund_needs_approval=False, refund_fails_first=10**6,
            item="913", amount=12900,
        )  # fmt: skip
        runner.rollback_continue(saga.pk)
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
    _queued_refunds(project, token_maker)
    return project  # fmt: skip


def _running_checkout(project: Project, saga_id: str) -> None:
    """A checkout sagaboard runs, stopped after its first step: its undo is the worker's
    (a registered handler), so a stop from its page rolls it back at once."""
    manual_flow.saga_begin(
        project=project, event_id=_event_id(), name="checkout-flow", saga_id=saga_id
    )
    step_id = manual_flow.step_add(
        project=project, event_id=_event_id(), saga_id=saga_id, tool_name="deduct_inventory",
        input={"sku": "xyz", "qty": 2},
        undo={"kind": "handler", "handler": "checkout.release_stock"},
    )  # fmt: skip
    manual_flow.step_complete(
        project=project, event_id=_event_id(), saga_id=saga_id, step_id=step_id,
        output={"sku": "xyz", "reserved": 2},
    )  # fmt: skip


def _queued_refunds(project: Project, maker: Any) -> None:
    """Three refunds posted with StoreBot's token (made by ``maker``, the demo superuser),
    their undos waiting in the queue; the biggest falls under the two-approver policy."""
    if not ApprovalPolicy.objects.filter(project=project, name=TWO_APPROVERS).exists():
        rule = {
            "name": TWO_APPROVERS,
            "tool_glob": "refund_payment",
            "condition": "input.amount > 1000",
            "approvers_required": 2,
            "enabled": True,
        }
        if maker is not None:  # as an admin makes one on the policies page: audited
            policy_save(project=project, data=rule, user=maker)
        else:
            ApprovalPolicy.objects.create(project=project, **rule)
    queued = [("demo-refund-queued-1", "562", 90), ("demo-refund-queued-2", "563", 240),
              ("demo-refund-two-approvers", "564", 1800)]  # fmt: skip
    if all(Saga.objects.filter(project=project, saga_id=sid).exists() for sid, _, _ in queued):
        return
    token = _storebot_token(project, maker)
    for saga_id, item, amount in queued:
        if not Saga.objects.filter(project=project, saga_id=saga_id).exists():
            saga = storebot_server_saga(
                project, saga_id, item=item, amount=amount, token_pk=token.pk
            )
            runner.rollback_continue(saga.pk)


def _storebot_token(project: Project, maker: Any) -> ApiToken:
    """StoreBot's token: its secret is not kept (the demo's sagas are posted in this
    process); it says who posted them, and who made it, so who may not decide."""
    token = ApiToken.objects.filter(
        project=project, label=STOREBOT_TOKEN, revoked_at__isnull=True
    ).first()
    if token is None:
        token = token_create(project=project, label=STOREBOT_TOKEN, acting_user=maker).token
    return token


def _event_id() -> str:
    return uuid.uuid4().hex


def storebot_server_saga(
    project: Project,
    saga_id: str = "storebot-1",
    *,
    refund_needs_approval: bool = True,
    return_fails_first: int = 0,
    refund_fails_first: int = 0,
    token_pk: int | None = None,
    item: str = "882",
    amount: int = 120,
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
    charge = {"chargeId": f"ch_{item}", "amount": amount, "currency": "EUR"}
    returned = {"itemId": item, "status": "returned", "rma": f"RMA-{item}"}
    refund_undo: dict[str, Any] = {"kind": "handler", "handler": "storebot.refund_payment"}
    if refund_fails_first:
        refund_undo["args"] = {"fail_first": refund_fails_first}
    steps = [
        ("return_item", {"itemId": item}, returned,
         {"kind": "handler", "handler": "storebot.return_item",
          "args": {"fail_first": return_fails_first}}, False),
        ("refund_payment", charge, {"refund": f"re_{item}", **charge},
         refund_undo, refund_needs_approval),
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
    demo_project().members.add(user)
    return user, created


def demo_people() -> list[tuple[DemoPerson, bool]]:
    """The demo's people (``DEMO_PEOPLE``), made once, each in its role and a member of the
    demo project; returns each with whether it was made now. A password changed since
    is left as it is."""
    User = get_user_model()
    project = demo_project()
    roles = {p.role for p in DEMO_PEOPLE}
    if Group.objects.filter(name__in=roles).count() < len(roles):
        roles_sync(Group, Permission)  # the migration made them; a flushed database has none
    # Instead of PBKDF2, scrypt (Django's too, in PASSWORD_HASHERS): a third of the time,
    # paid for each person at every fresh load (the live tests load the demo often); the
    # first login re-hashes the password with the preferred hasher.
    algorithms = [h.algorithm for h in get_hashers()]
    slow = algorithms[0].startswith("pbkdf2") and "scrypt" in algorithms
    hasher = "scrypt" if slow else "default"
    made = []
    for person in DEMO_PEOPLE:
        user = User.objects.filter(username=person.username).first()
        created = user is None
        if user is None:
            hashed = make_password(person.password, hasher=hasher)
            user = User.objects.create(
                username=person.username, email=f"{person.username}@example.com", password=hashed
            )
        user.groups.add(Group.objects.get(name=person.role))
        project.members.add(user)
        made.append((person, created))
    return made


def demo_agent_token(path: Path) -> str:
    """The demo agent's API token for the demo project: the one kept in ``path`` while it
    still works, else a new one, kept there (readable by its owner only) for the next start.

    A token's secret is never stored by sagaboard, so the agent keeps its own: each
    ``make run`` reuses it rather than leaving a new token behind every time.
    """
    project = Project.objects.filter(slug=DEMO_PROJECT).first()
    if project is None:
        raise LookupError("no demo project: run manage.py sagaboard_demo first")
    if path.is_file():
        kept = path.read_text().strip()
        token = token_authenticate(kept)
        if token is not None and token.project.slug == DEMO_PROJECT:
            return kept
    secret = token_create(project=project, label=AGENT_TOKEN).secret
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file left from before keeps its mode otherwise
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    return secret

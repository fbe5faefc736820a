"""The demo agent: a checkout agent in a process of its own, posting to sagaboard over HTTP.

``make run`` starts it beside the web process and the worker (``manage.py
sagaboard_demo_agent``, which gives it a token of the demo project) and stops it with
them. It uses nothing of sagaboard but its API, through the Python SDK, as any agent
would: each checkout is an ``undo_core.Saga`` whose store is a
:class:`~undo_core.remote.SagaboardStore`, so the dashboard shows it running, step by
step. The agent "thinks" a few seconds before each tool call (as an LLM agent does), then
calls the tool; when a checkout ends, the next one starts after a pause.

Stop one from its page (an operator: ``olga``): the SDK hears the rollback request in the
answer to its next events, or by its idle poll, and at the next step boundary the
engine runs the agent's own undos, newest first (each prints what it undoes), and the saga
ends ROLLED_BACK; the agent prints who stopped it and why, and goes on with the next one.
Asked to stop itself (SIGTERM, as ``make run``'s exit does), it rolls back the checkout
it is in the middle of, the same way, and exits; events the server could not take by then
wait in the spool, and the next start sends them. A token the server refuses (revoked while
the agent runs) ends it the same way, with :class:`TokenRefused` saying so: the SDK keeps
what a 401 refuses queued and retries it (a configuration problem must not lose events), so
the agent asks for itself, at each step boundary, whether its token still works.

Nothing here imports Django: the tools are functions on an in-memory shop.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from undo_core import (
    EventKind,
    RollbackRequestedError,
    Saga,
    SagaEvent,
    SagaRollbackError,
    define_tool,
)
from undo_core.remote import SagaboardStore

SAGA_NAME = "demo-agent-checkout"
PREFIX = "demo agent:"
_PROBE = "/api/v1/rollback-requests"  # answers 200 to a valid token once the server is up

Say = Callable[[str], None]


def _say(text: str) -> None:
    print(f"{PREFIX} {text}", flush=True)


class TokenRefused(PermissionError):
    """sagaboard answered 401 or 403 to the agent's token: waiting cannot make it work."""

    def __init__(self, url: str, status: int) -> None:
        super().__init__(
            f"sagaboard at {url} refused the agent's token ({status}): revoked, or unknown "
            "there; start the agent again to make a new one"
        )


def _client(url: str, token: str, transport: httpx.BaseTransport | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=url, headers=headers, timeout=5, transport=transport)


def _token_works(http: httpx.Client) -> bool:
    """``True`` once sagaboard answers the token; ``False`` while it cannot tell (no
    answer, a 5xx); ``TokenRefused`` on a 401 or 403."""
    try:
        answer = http.get(_PROBE)
    except httpx.TransportError:
        return False
    if answer.status_code in (401, 403):
        raise TokenRefused(str(http.base_url).rstrip("/"), answer.status_code)
    return answer.status_code == 200


@dataclass
class Shop:
    """The agent's outside world: stock, card charges, shipments and mail, in memory, so the
    undos visibly put things back."""

    stock: dict[str, int] = field(default_factory=lambda: {"sku-mug": 50, "sku-tee": 50})
    charges: dict[str, int] = field(default_factory=dict)
    shipments: dict[str, str] = field(default_factory=dict)
    holds: dict[str, str] = field(default_factory=dict)


def checkout_tools(shop: Shop, say: Say) -> list[Any]:
    """The four tools of a checkout, each with its undo (so a rollback is clean)."""

    def reserve(inp: dict[str, Any]) -> dict[str, Any]:
        shop.stock[inp["sku"]] -= inp["qty"]
        say(f"  reserve_stock: {inp['qty']} x {inp['sku']} reserved")
        return {"sku": inp["sku"], "qty": inp["qty"], "reserved": True}

    def release(out: dict[str, Any], inp: dict[str, Any]) -> None:
        shop.stock[inp["sku"]] += inp["qty"]
        say(f"  undo reserve_stock: {inp['qty']} x {inp['sku']} back in stock")

    def charge(inp: dict[str, Any]) -> dict[str, Any]:
        charge_id = f"ch_{secrets.token_hex(4)}"
        shop.charges[charge_id] = inp["amount"]
        say(f"  charge_card: {inp['amount']} charged to {inp['customerId']} ({charge_id})")
        return {"charge": charge_id, **inp}

    def refund(out: dict[str, Any], inp: dict[str, Any]) -> None:
        del shop.charges[out["charge"]]
        say(f"  undo charge_card: charge {out['charge']} refunded ({inp['amount']})")

    def ship(inp: dict[str, Any]) -> dict[str, Any]:
        shipment = f"shp_{secrets.token_hex(4)}"
        shop.shipments[shipment] = inp["orderId"]
        say(f"  create_shipment: order {inp['orderId']} booked as {shipment}")
        return {"shipment": shipment, **inp}

    def cancel(out: dict[str, Any], inp: dict[str, Any]) -> None:
        del shop.shipments[out["shipment"]]
        say(f"  undo create_shipment: shipment {out['shipment']} cancelled")

    def hold(inp: dict[str, Any]) -> dict[str, Any]:
        shop.holds[inp["orderId"]] = inp["to"]
        say(f"  queue_receipt: receipt for {inp['orderId']} queued to {inp['to']}")
        return {"queued": True, **inp}

    def unhold(out: dict[str, Any], inp: dict[str, Any]) -> None:
        del shop.holds[inp["orderId"]]
        say(f"  undo queue_receipt: receipt for {inp['orderId']} taken out of the queue")

    return [
        define_tool("reserve_stock", reserve, release),
        define_tool("charge_card", charge, refund),
        define_tool("create_shipment", ship, cancel),
        define_tool("queue_receipt", hold, unhold),
    ]


def wait_for_server(
    url: str,
    token: str,
    *,
    stop: threading.Event,
    transport: httpx.BaseTransport | None = None,
    say: Say = _say,
    every: float = 1.0,
) -> bool:
    """Until sagaboard answers this token (``True``), or ``stop`` is set (``False``).

    ``make run`` starts the agent with the web process, which takes a moment to listen:
    a refused connection, a 5xx or a timeout is asked again. A 401 or 403 (a bad token)
    cannot get better by waiting: ``TokenRefused``.
    """
    told = False
    with _client(url, token, transport) as http:
        while not stop.is_set():
            if _token_works(http):
                return True
            if not told:
                say(f"waiting for sagaboard at {url} ...")
                told = True
            stop.wait(every)
    return False


@dataclass
class Agent:
    """The checkout loop. ``run()`` until ``stop`` is set (or ``sagas`` checkouts ended)."""

    url: str
    token: str
    project: str = "demo"
    think_seconds: float = 4.0
    """How long the agent thinks before each tool call: a stop heard meanwhile is carried
    out at the call."""
    pause_seconds: float = 8.0
    """Between one checkout's end and the next one's start."""
    sagas: int | None = None
    """Stop after this many checkouts (``None``: until stopped)."""
    hold_seconds: float | None = 0.0
    """How long a checkout whose four calls are done waits for the carrier's pickup (open,
    so there is always one to stop) before it completes; ``None``: until someone stops it
    (``make run``: the demo's list does not fill up with completed checkouts)."""
    stop: threading.Event = field(default_factory=threading.Event)
    transport: httpx.BaseTransport | None = None
    spool: Path | None = None
    rollback_poll: float = 2.0
    """While the agent thinks, the SDK asks this often whether a rollback was requested."""
    say: Say = _say
    shop: Shop = field(default_factory=Shop)
    ended: list[tuple[str, str]] = field(default_factory=list)
    """``(saga id, status)`` of each checkout that ended, in order."""
    _http: httpx.Client | None = field(default=None, init=False, repr=False)
    """Asks whether the token still works (``_token_works``), while ``run()`` runs."""

    def run(self) -> list[tuple[str, str]]:
        if not wait_for_server(
            self.url, self.token, stop=self.stop, transport=self.transport, say=self.say
        ):
            return self.ended
        self.say(
            f"connected to {self.url}: a checkout step every {self.think_seconds:g} s; "
            "stop one from its page (as an operator) and watch its undos run here"
        )
        store = SagaboardStore(
            self.url, self.token, transport=self.transport, spool=self.spool,
            rollback_poll=self.rollback_poll, flush_interval=0.05,
        )  # fmt: skip
        self._http = http = _client(self.url, self.token, self.transport)
        refused = False
        try:
            n = 0
            while not self.stop.is_set() and (self.sagas is None or n < self.sagas):
                n += 1
                self.ended.append(self.checkout(store, n))
                if self.sagas is None or n < self.sagas:
                    self.stop.wait(self.pause_seconds)
        except TokenRefused:
            refused = True
            raise
        finally:
            # Refused: what is queued cannot be sent with this token; it stays in the spool.
            store.close(timeout=0 if refused else 3)
            http.close()
            self._http = None
        self.say("stopped")
        return self.ended

    def _token_check(self) -> None:
        """``TokenRefused`` if sagaboard no longer takes the agent's token (no answer: the
        SDK queues, and the agent goes on)."""
        if self._http is not None:
            _token_works(self._http)

    def _stopping(self, saga: Saga, why: str = "the agent is stopping") -> str:
        """Roll the checkout back here, its undos newest first; its status."""
        saga.rollback(actor="demo-agent")
        self.say(f"checkout {saga.id} {saga.status}: {why}")
        return str(saga.status)

    def checkout(self, store: SagaboardStore, n: int) -> tuple[str, str]:
        """One checkout saga, from its start to its end; its id and how it ended."""
        saga_id = f"agent-checkout-{secrets.token_hex(3)}"
        saga = Saga(SAGA_NAME, saga_id=saga_id, store=store, listeners=[self._announce])
        sku = "sku-mug" if n % 2 else "sku-tee"
        order = f"o-{saga_id.rsplit('-', 1)[-1]}"
        calls = zip(
            checkout_tools(self.shop, self.say),
            [{"sku": sku, "qty": 1 + n % 3}, {"customerId": f"cus_{n}", "amount": 1500 + n},
             {"orderId": order}, {"orderId": order, "to": f"customer-{n}@example.com"}],
            strict=True,
        )  # fmt: skip
        self._token_check()
        saga.start()  # on the dashboard at once, before the first tool call
        self.say(f"checkout {saga_id} started: {self.url}/sagas/{self.project}/{saga_id}/")
        try:
            for tool, given in calls:
                if self.stop.wait(self.think_seconds):
                    return saga_id, self._stopping(saga)
                self._token_check()
                saga.execute(tool, given)
        except TokenRefused:
            self.ended.append((saga_id, self._stopping(saga)))
            raise
        except RollbackRequestedError as stopped:
            self.say(
                f"checkout {saga_id} {stopped.status}: stopped by {stopped.requested_by}"
                f" ({stopped.reason or 'no reason given'})"
            )
            return saga_id, str(stopped.status)
        except SagaRollbackError as failed:
            self.say(f"checkout {saga_id} {failed.status}: {failed.cause}")
            return saga_id, str(failed.status)
        try:
            picked_up = self._await_pickup(saga, store)
            if picked_up is None:
                self._token_check()
        except TokenRefused:
            self.ended.append((saga_id, self._stopping(saga)))
            raise
        if picked_up is not None:
            return saga_id, picked_up
        saga.complete()
        self.say(f"checkout {saga_id} {saga.status}")
        return saga_id, str(saga.status)

    def _await_pickup(self, saga: Saga, store: SagaboardStore) -> str | None:
        """Hold the checkout open for ``hold_seconds``; the saga's status if it was stopped
        meanwhile (by a person on its page, as the SDK heard, or by the agent's own stop)."""
        if self.hold_seconds == 0:
            return None
        self.say(f"checkout {saga.id}: waiting for the carrier's pickup; stop it from its page")
        waited = 0.0
        while self.hold_seconds is None or waited < self.hold_seconds:
            if self.stop.wait(self.rollback_poll):
                return self._stopping(saga)
            self._token_check()
            waited += self.rollback_poll
            request = store.rollback_requested(saga.id)
            if request is not None:
                saga.rollback(actor=request.by)
                self.say(
                    f"checkout {saga.id} {saga.status}: stopped by {request.by}"
                    f" ({request.reason or 'no reason given'})"
                )
                return str(saga.status)
        return None

    def _announce(self, event: SagaEvent) -> None:
        if event.kind is EventKind.SAGA and event.to_state == "COMPENSATING":
            who = f" (asked by {event.actor})" if event.actor else ""
            self.say(f"rolling back {event.saga_id}{who}: my own undos, newest first:")

"""The checkout flow, agent-undo's second demo: one order completes, the next one rolls back.

Deduct inventory, charge the customer, send the confirmation email. The first
order goes through (COMPLETED); for the second the email service is down, so
the charge is refunded and the stock re-added, newest first, and the saga ends
ROLLED_BACK with the seed's message::

    python -m undo_core.demos.checkout [--url http://127.0.0.1:8000 --token sgb_...]

Both runs share one inventory and one payment ledger, so the end state shows
that the completed order stays and the failed one leaves no trace.
"""

from __future__ import annotations

import argparse
from typing import Any

from .. import Saga, SagaRollbackError, SagaStore, Tool, define_tool
from ._support import (
    add_remote_args,
    announce_rollback,
    check_remote_args,
    dashboard_url,
    remote_store,
    say,
)


class Backend:
    """The world the agent changes: stock per SKU, Stripe charges and refunds, sent emails."""

    def __init__(self) -> None:
        self.stock: dict[str, int] = {"abc": 10}
        self.charges: dict[str, int] = {}
        self.refunded: list[str] = []
        self.emails: list[str] = []
        self.email_up = True

    def tools(self) -> tuple[Tool, Tool, Tool]:
        """The seed's three checkout tools; ``send_email`` has no undo (mail is not recalled)."""

        def deduct(inp: dict[str, Any]) -> dict[str, Any]:
            self.stock[inp["sku"]] -= inp["qty"]
            say(f"    inventory: {inp['sku']} -{inp['qty']} (left: {self.stock[inp['sku']]})")
            return {"sku": inp["sku"], "left": self.stock[inp["sku"]]}

        def restock(output: Any, inp: dict[str, Any]) -> None:
            self.stock[inp["sku"]] += inp["qty"]
            left = self.stock[inp["sku"]]
            say(f"    undo deduct_inventory: {inp['sku']} +{inp['qty']} (left: {left})")

        def charge(inp: dict[str, Any]) -> dict[str, Any]:
            charge_id = f"ch_{len(self.charges) + 1}"
            self.charges[charge_id] = inp["amount"]
            say(f"    Stripe: charged {inp['customerId']} ${inp['amount'] / 100:.2f} ({charge_id})")
            return {"id": charge_id, "amount": inp["amount"]}

        def refund(charge: dict[str, Any]) -> None:
            self.refunded.append(charge["id"])
            say(f"    undo charge_customer: {charge['id']} refunded")

        def email(inp: dict[str, Any]) -> dict[str, Any]:
            if not self.email_up:
                say("    email: SMTP 421 service not available")
                raise ConnectionError("SMTP 421 service not available")
            self.emails.append(inp["to"])
            say(f"    email: confirmation sent to {inp['to']}")
            return {"sent": True}

        return (
            define_tool("deduct_inventory", deduct, restock),
            define_tool("charge_customer", charge, refund),
            define_tool("send_email", email),
        )


def checkout(backend: Backend, customer: str, store: SagaStore | None) -> Saga:
    """One order as one saga: COMPLETED if every step succeeds, else rolled back."""
    deduct_inventory, charge_customer, send_email = backend.tools()
    saga = Saga("checkout-flow", store=store, listeners=[announce_rollback])
    try:
        with saga:  # completes the saga when the block ends without an error
            saga.execute(deduct_inventory, {"sku": "abc", "qty": 1})
            saga.execute(charge_customer, {"customerId": customer, "amount": 2999})
            saga.execute(send_email, {"to": f"{customer}@example.com"})
    except SagaRollbackError as err:
        say(f"  SagaRollbackError: {err}")
    say(f"  saga.status: {saga.status}")
    say("  steps: " + ", ".join(f"{s.id} {s.tool_name} {s.state}" for s in saga.steps))
    return saga


def main(argv: list[str] | None = None) -> int:
    """Run a good order and a failing one, then show the books."""
    parser = argparse.ArgumentParser(prog="python -m undo_core.demos.checkout", description=__doc__)
    add_remote_args(parser)
    args = parser.parse_args(argv)
    check_remote_args(parser, args)

    backend = Backend()
    with remote_store(args.url, args.token) as store:
        say("Order 1: everything works")
        first = checkout(backend, "ada", store)
        say()
        say("Order 2: the email service is down at step 3")
        backend.email_up = False
        second = checkout(backend, "bob", store)
    say()
    kept = [c for c in backend.charges if c not in backend.refunded]
    say(f"Inventory abc: {backend.stock['abc']} (10 - 1 sold); charges kept: {', '.join(kept)}")
    say("Inventory was re-added, charge was refunded: the system is clean.")
    if args.url:
        for saga in (first, second):
            say(f"On the dashboard ({saga.status}): {dashboard_url(args.url, args.token, saga.id)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

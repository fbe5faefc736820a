"""StoreBot's return, agent-undo's first demo: FedEx fails, the refund and the return are undone.

A customer asks to return item #882 and get a refund. The agent marks the item
returned, refunds $40 through Stripe, then asks FedEx for a shipping label and
FedEx answers 500. Without a saga the shop is left half-done (item returned,
money gone, no label); with one, the refund is cancelled and the item is
active again, newest first, and the agent gets the seed's clean error::

    python -m undo_core.demos.storebot [--url http://127.0.0.1:8000 --token sgb_...]

The "database", Stripe and FedEx are dicts and lists in this process, so the
demo shows real state being restored, not just statuses changing.
"""

from __future__ import annotations

import argparse
from typing import Any

from .. import Saga, SagaRollbackError, SagaStatus, SagaStore, define_tool
from ._support import (
    add_remote_args,
    announce_rollback,
    check_remote_args,
    dashboard_url,
    remote_store,
    say,
)


class Shop:
    """The outside world of the demo: the shop's item table and its Stripe refunds."""

    def __init__(self) -> None:
        self.items: dict[str, str] = {"882": "active"}
        self.refunds: dict[str, dict[str, Any]] = {}


def run(store: SagaStore | None = None) -> tuple[Saga, Shop]:
    """Run the return; the saga ends ROLLED_BACK. ``store``: where the saga is also recorded."""
    shop = Shop()

    def mark_returned(inp: dict[str, Any]) -> dict[str, Any]:
        shop.items[inp["itemId"]] = "returned"
        say(f"    DB: item #{inp['itemId']} marked as returned")
        return {"itemId": inp["itemId"], "status": "returned"}

    def mark_active(output: dict[str, Any], inp: dict[str, Any]) -> None:
        shop.items[inp["itemId"]] = "active"
        say(f"    undo return_item: item #{inp['itemId']} is active again")

    def issue_refund(inp: dict[str, Any]) -> dict[str, Any]:
        refund = {"id": "re_1", "chargeId": inp["chargeId"], "amount": inp["amount"]}
        shop.refunds[refund["id"]] = refund
        say(f"    Stripe: ${inp['amount'] / 100:.2f} refund {refund['id']} issued")
        return refund

    def cancel_refund(refund: dict[str, Any]) -> None:
        del shop.refunds[refund["id"]]
        say(f"    undo refund_payment: refund {refund['id']} cancelled")

    def create_label(inp: dict[str, Any]) -> dict[str, Any]:
        say("    FedEx: 500 Internal Server Error")
        raise ConnectionError("FedEx API returned 500")

    return_item = define_tool("return_item", mark_returned, mark_active)
    refund_payment = define_tool("refund_payment", issue_refund, cancel_refund)
    generate_label = define_tool("generate_label", create_label)

    saga = Saga("storebot-return", store=store, listeners=[announce_rollback])
    steps = [
        ("Step 1: Mark item #882 as returned in database  (DB Write)", return_item,
         {"itemId": "882"}),
        ("Step 2: Issue $40 refund via Stripe             (Payment API)", refund_payment,
         {"chargeId": "ch_123", "amount": 4000}),
        ("Step 3: Generate shipping label via FedEx        (Shipping API)", generate_label,
         {"orderId": "o-882"}),
    ]  # fmt: skip
    try:
        for title, tool, inp in steps:
            say(title)
            saga.execute(tool, inp)
    except SagaRollbackError as err:
        say()
        say(f"SagaRollbackError: {err}")
        say(f"  cause: {err.cause!r}")
    return saga, shop


def main(argv: list[str] | None = None) -> int:
    """Tell the story, then show that the shop is back where it started."""
    parser = argparse.ArgumentParser(prog="python -m undo_core.demos.storebot", description=__doc__)
    add_remote_args(parser)
    args = parser.parse_args(argv)
    check_remote_args(parser, args)

    say('StoreBot demo: "I want to return item #882 and get a refund."')
    say()
    with remote_store(args.url, args.token) as store:
        saga, shop = run(store)
    say()
    say(f"saga.status: {saga.status}")
    for step in saga.steps:
        say(f"  {step.id}  {step.tool_name:<15} {step.state}")
    say(f"DB: item #882 is {shop.items['882']}; Stripe: {len(shop.refunds)} refund(s) outstanding")
    if saga.status is SagaStatus.ROLLED_BACK and shop.items["882"] == "active" and not shop.refunds:
        say("All side-effects were automatically undone: nobody wakes up at 2 AM.")
    if args.url:
        say(f"On the dashboard: {dashboard_url(args.url, args.token, saga.id)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What the saga page's JSON trees and labelled times cost: ``python -m benchmarks.payload_trees``.

No database: the tree, its HTML and the diff (``sagaboard.ui.payloads``,
``sagaboard_payload.tree_html``) and the time tag (``{% when %}``) are pure, so this
times them alone, for what a saga page draws at its limits:

* 1,000 steps (``SAGABOARD_MAX_STEPS``), each with a typical input and output (an
  order: 12 nodes) drawn as trees, plus their input → output diffs;
* one value at the tree's budget (500 nodes, the default ``SAGABOARD_PAYLOAD_MAX_NODES``)
  out of 10,000, and one 1 MB string cut at 2,000 characters;
* 1,000 times through ``{% when %}`` (an event log of 1,000 events).

Prints the median of ``--repeat`` runs (default 5) in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sagaboard.config.settings")
    import django

    django.setup()


def _median_ms(run: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    _setup()
    from django.template import Context, Template

    from sagaboard.ui import payloads
    from sagaboard.ui.templatetags.sagaboard_payload import tree_html

    limits = payloads.Limits()
    order = {
        "orderId": "o-17",
        "customer": {"id": "c-9", "email": "ann@example.com"},
        "items": [{"sku": "A-1", "qty": 1}, {"sku": "B-2", "qty": 2}],
        "total": 31.5,
        "gift": False,
    }
    refund = {"refund": {"id": "r-9", "amount": 31.5}, "orderId": "o-17", "status": "ok"}
    big = {"rows": [{"n": n, "name": f"row {n}"} for n in range(3_334)]}
    huge = {"blob": "x" * 1_000_000}
    at = datetime(2026, 1, 31, 12, 0, 5, tzinfo=UTC)
    moments = [at + timedelta(seconds=n) for n in range(1_000)]
    when = Template('{% for t in ts %}{% when t "event" precise=True bare=True %}{% endfor %}')

    def thousand_steps() -> None:
        for _ in range(1_000):
            tree_html(order, "input", "/x/input.json", limits)
            tree_html(refund, "output", "/x/output.json", limits)
            payloads.diff(order, refund, limits)

    figures = {
        "1,000 steps: input and output trees + diff": thousand_steps,
        "one value at the budget (500 of 10,000 nodes)": lambda: tree_html(
            big, "input", "/x", limits
        ),
        "one 1 MB string, cut at 2,000 characters": lambda: tree_html(huge, "input", "/x", limits),
        "diff of two 10,000-node values": lambda: payloads.diff(
            big, {"rows": big["rows"][1:]}, limits
        ),
        "1,000 times through {% when %}": lambda: when.render(Context({"ts": moments})),
    }
    print(f"{'figure':<50} {'median ms':>10}")
    for name, run in figures.items():
        print(f"{name:<50} {_median_ms(run, args.repeat):>10.1f}")


if __name__ == "__main__":
    main()

"""undo_core.remote: report local sagas to sagaboard, and call its API (needs ``httpx``).

Mirror every transition of a saga that runs in this process; the agent never
waits for, or fails because of, the dashboard (events are queued, batched,
retried, optionally spooled to disk)::

    from undo_core import Saga
    from undo_core.remote import SagaboardStore

    with SagaboardStore("https://sagaboard.example", token, spool="var/sagaboard.spool") as store:
        with Saga("checkout", store=store) as saga:
            saga.execute(reserve_stock, {"sku": "A-1"})
            saga.execute(charge_card, {"amount": 42})
    # leaving the block flushed the queue (events not sent stay in the spool)

Drive a saga by hand over the API, as the seed's MCP tools do::

    from undo_core.remote import SagaboardClient

    with SagaboardClient("https://sagaboard.example", token) as client:
        saga = client.begin("checkout-flow")
        step = client.add_step(saga["id"], "create_backup", {}, undo="rm -f backup.json")
        client.complete_step(saga["id"], step["id"])
        client.rollback(saga["id"], reason="shipping API down")

Let operators decide from the dashboard: approve an undo before it runs, and
retry, resolve or leave one that failed (the saga still runs here)::

    from undo_core import Saga
    from undo_core.remote import SagaboardClient, SagaboardGate, SagaboardStore

    with (
        SagaboardClient("https://sagaboard.example", token) as client,
        SagaboardStore("https://sagaboard.example", token) as store,
        SagaboardGate(client, store=store, max_wait=3600) as gate,
    ):
        saga = Saga("checkout", store=store, gate=gate, on_compensation_failure="halt")
        ...  # a rollback waits (up to an hour per question) for people's decisions

``AsyncSagaboardGate`` (with ``AsyncSagaboardClient``) does the same for
``AsyncSaga``; see ``_gate.py`` for the waits, the acknowledgements and the errors.

The wire contract is docs/api.md: ``change_to_event`` writes one transition event,
``saga_from_json`` and ``step_from_json`` read a saga or a step back (sagaboard's
``sagaboard_verify`` reads its log with them, so both sides share one format).
``undo_core`` itself does not import this package, so the engine keeps needing
nothing but the standard library.
"""

from ._client import AsyncSagaboardClient, SagaboardClient
from ._errors import SagaboardAPIError, SagaboardUnavailable
from ._gate import AsyncSagaboardGate, SagaboardGate
from ._store import SagaboardStore
from ._wire import change_to_event, saga_from_json, step_from_json

__all__ = [
    "AsyncSagaboardClient",
    "AsyncSagaboardGate",
    "SagaboardAPIError",
    "SagaboardClient",
    "SagaboardGate",
    "SagaboardStore",
    "SagaboardUnavailable",
    "change_to_event",
    "saga_from_json",
    "step_from_json",
]

"""Runnable ports of agent-undo's three demos, on undo_core alone.

The seed ships ``test-demo.ts`` (StoreBot), ``checkout-demo.ts`` and
``crash-recovery-demo.ts``; these are the same stories in Python, so anyone
can watch the engine work in one command before reading any code::

    python -m undo_core.demos.storebot
    python -m undo_core.demos.checkout
    python -m undo_core.demos.crash_recovery [--db PATH]

Each needs nothing but the standard library. With ``--url URL`` (and a token
in ``--token`` or ``SAGABOARD_TOKEN``) the sagas are also mirrored to a running
sagaboard with :class:`~undo_core.remote.SagaboardStore` (which needs
``httpx``), and the demo prints where to see them on the dashboard.
"""

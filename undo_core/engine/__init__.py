"""The saga engine: how a saga runs its steps and unwinds them, newest first.

Top to bottom (the import-linter contract ``engine-layers`` keeps this order): what
builds on sagas (``declarative``, ``recovery``, ``wrap``), the two drivers ``Saga`` and
``AsyncSaga`` (``saga``), their shared face ``SagaCore`` (``core``), the algorithms
written once for both (``flows``, with ``effects``), and the ledger that writes each
change to the store (``ledger``, with ``steps``). ``reports`` and ``audit`` say what a
run left behind.
"""

"""Where sagas are kept: the store protocol, the rules every stored change obeys, SQLite.

``storage`` (the :class:`~undo_core.SagaStore` protocol and ``MemoryStore``), ``rules``
(the check on every change, and replay), ``serialize`` and ``record_json`` (what a store
can keep, and the records' one JSON form), ``sqlite_store`` and ``paths`` (the local file
store). Built on :mod:`undo_core.vocabulary` only; the SDK's ``SagaboardStore`` lives in
:mod:`undo_core.remote`.
"""

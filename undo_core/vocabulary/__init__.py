"""The words every part of undo_core speaks, defined once.

States and their one transition table (``states``), the immutable records a store keeps
(``records``), tools and their retry policy (``tools``, ``policies``), approval gates and
their questions (``gates``), how a rollback came to rest (``outcome``), the clock and the
error tree (``clock``, ``errors``). This package imports nothing else of undo_core; the
stores, the engine, the SDK and the MCP server all import from it.
"""

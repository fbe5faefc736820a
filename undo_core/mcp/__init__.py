"""undo_core.mcp: the seed's MCP server (``undo-mcp``), needs the ``mcp`` extra.

The seven saga tools of agent-undo-mcp over stdio, standalone (undo_core and a
SQLite file; undo commands run here) or connected to sagaboard (its manual-flow
API; command undos wait for approval in the dashboard). See ``server.py``.
"""

"""Agent-framework adapters: every tool call a saga step, a failure rolls back.

Each adapter lives in its own module so importing one framework never imports
another: ``undo_core.adapters.pydantic_ai``, ``undo_core.adapters.openai_agents``
and ``undo_core.adapters.langchain`` (install the ``undo-core[...]`` extra of
the same name). The tool call id of every call is kept on its step, in
``step.metadata["tool_call_id"]``.
"""

from ._common import TOOL_CALL_ID

__all__ = ["TOOL_CALL_ID"]

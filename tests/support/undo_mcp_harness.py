"""Drive ``undo-mcp`` as an MCP client does: the ``mcp`` SDK's own client, over stdio."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

ROOT = Path(__file__).resolve().parents[2]

Connect = Callable[..., AbstractAsyncContextManager[ClientSession]]


@asynccontextmanager
async def mcp_session(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    elicitation_callback: Any = None,
) -> AsyncIterator[ClientSession]:
    """Spawn ``python -m undo_core.mcp.server ARGS`` in ``cwd`` and open a session to it.

    ``elicitation_callback`` answers the server's questions (and declares the capability).
    """
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "undo_core.mcp.server", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, elicitation_callback=elicitation_callback) as session,
    ):
        await session.initialize()
        yield session


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; its structured content."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, text(result)
    assert text(result), "a model must get a text answer"
    data: dict[str, Any] = result.structured_content
    return data


async def call_error(session: ClientSession, tool: str, **arguments: Any) -> str:
    """Call a tool that must answer a tool error; its message."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, text(result)
    return text(result)

"""The live feed as a test sees it: a websocket to the real ASGI app, messages awaited by pattern,
and a saga run through the engine on the ORM store (so the relay has something to send)."""

from __future__ import annotations

import re

from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from sagaboard.config.asgi import application
from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.models import Project, Saga
from undo_core import Saga as EngineSaga
from undo_core import define_tool

TOOL = define_tool("reserve_stock", lambda i: {"ok": True}, lambda o, i: None)


@database_sync_to_async
def run_saga(project: Project, saga_id: str) -> int:
    saga = EngineSaga("checkout-flow", saga_id=saga_id, store=DjangoStore(project))
    saga.execute(TOOL, {"sku": "A-1"})
    saga.complete()
    return Saga.objects.get(project=project, saga_id=saga_id).pk


def feed(query: str, cookie: str | None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if cookie:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    return WebsocketCommunicator(application, f"/ws/sagas/?{query}", headers=headers)


async def received(comm: WebsocketCommunicator, pattern: str, timeout: float = 5.0) -> str:
    """Messages until one matches ``pattern`` (bounded by ``timeout`` per message)."""
    seen = []
    for _ in range(50):
        text = await comm.receive_from(timeout=timeout)
        seen.append(text)
        if re.search(pattern, text):
            return text
    raise AssertionError(f"{pattern!r} never arrived in {seen!r}")

"""A browser that goes away mid-send (its tab closed, or it navigated elsewhere) is not an
error: the server's send raises ``ClientDisconnected`` (uvicorn's, an ``OSError``), logged at
debug without a traceback; a fragment that cannot be rendered still is an ERROR."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from uvicorn.protocols.utils import ClientDisconnected

from sagaboard.live import consumers
from sagaboard.live.consumers import SagaFeedConsumer, _View

pytestmark = pytest.mark.asyncio


def _consumer(send: Any) -> SagaFeedConsumer:
    consumer = SagaFeedConsumer()
    consumer.view = _View.from_params({"list": "1"})
    consumer.outbox = [(1, 10), (1, 11)]
    consumer.send = send  # type: ignore[method-assign]
    closed: list[int] = []

    async def close(code: int | None = None, reason: str | None = None) -> None:
        closed.append(code or 0)

    consumer.close = close  # type: ignore[method-assign]
    consumer.closed = closed  # type: ignore[attr-defined]
    return consumer


async def test_a_closed_tab_is_logged_at_debug_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def rendered(view: Any, items: list[tuple[int, int]]) -> list[str]:
        return [f"<p>{log_id}</p>" for _, log_id in items]

    sent: list[str] = []

    async def send(text_data: str) -> None:
        sent.append(text_data)
        raise ClientDisconnected

    monkeypatch.setattr(consumers.shared, "get_many", rendered)
    consumer = _consumer(send)
    with caplog.at_level(logging.DEBUG, logger="sagaboard.live.consumers"):
        await consumer._send_queued()
    mine = [r for r in caplog.records if r.name == "sagaboard.live.consumers"]
    assert [r.levelno for r in mine] == [logging.DEBUG], [r.getMessage() for r in mine]
    assert mine[0].exc_info is None and "went away" in mine[0].getMessage()
    assert sent == ["<p>10</p>"]  # nothing more after the first send found the tab gone
    assert consumer.revoked and consumer.closed == []  # type: ignore[attr-defined]


async def test_a_summary_to_a_closed_tab_is_no_error_either(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def send(text_data: str) -> None:
        raise ClientDisconnected

    consumer = _consumer(send)
    consumer.view = _View.from_params({"badges": "1"})
    with caplog.at_level(logging.DEBUG, logger="sagaboard.live.consumers"):
        await consumer._send_summary()
        await consumer.live_state(True)  # revoked by the first: not sent again
    levels = [r.levelno for r in caplog.records if r.name == "sagaboard.live.consumers"]
    assert levels == [logging.DEBUG]


async def test_a_fragment_that_cannot_be_rendered_is_still_an_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(view: Any, items: list[tuple[int, int]]) -> list[str]:
        raise RuntimeError("the template is broken")

    async def send(text_data: str) -> None:
        raise AssertionError("nothing to send")

    monkeypatch.setattr(consumers.shared, "get_many", broken)
    consumer = _consumer(send)
    with caplog.at_level(logging.DEBUG, logger="sagaboard.live.consumers"):
        await consumer._send_queued()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert consumer.closed == [1011]  # type: ignore[attr-defined]

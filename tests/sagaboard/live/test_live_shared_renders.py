"""A render shared by a process's sockets survives the socket that asked for it first.

The saga page's feed once died for good: a browser left the page while its socket's
catch-up render ran, the cancellation reached the shared render, and every later socket
of that saga (the operator's own page after a click, each reconnect) awaited the same
cancelled render and closed with an error; the page's status stayed COMPENSATING.
"""

from __future__ import annotations

import asyncio

from sagaboard.live.consumers import _Fragments


def test_a_socket_closed_mid_render_leaves_the_shared_render_to_the_others() -> None:
    async def scenario() -> list[str]:
        shared = _Fragments()
        started = asyncio.Event()
        release = asyncio.Event()
        renders = 0

        async def render() -> str:
            nonlocal renders
            renders += 1
            started.set()
            await release.wait()
            return "<li>step</li>"

        leaving = asyncio.ensure_future(shared._once(("detail", 1, 7), render))
        staying = asyncio.ensure_future(shared._once(("detail", 1, 7), render))
        await started.wait()
        leaving.cancel()  # the first browser left the page
        await asyncio.sleep(0)
        release.set()
        html = await staying
        later = await shared._once(("detail", 1, 7), render)  # a reconnect
        assert leaving.cancelled()
        assert renders == 1
        return [html, later]

    assert asyncio.run(scenario()) == ["<li>step</li>", "<li>step</li>"]


def test_a_render_cancelled_anyway_is_made_again_not_shared() -> None:
    async def scenario() -> str:
        shared = _Fragments()

        async def never() -> str:
            await asyncio.Event().wait()
            return "never"

        async def render() -> str:
            return "<li>again</li>"

        first = asyncio.ensure_future(shared._once(("row", 2, 9), never))
        await asyncio.sleep(0)
        shared.tasks[("row", 2, 9)].cancel()  # e.g. the loop shutting a task down
        await asyncio.wait([first])
        assert first.cancelled()
        html: str = await shared._once(("row", 2, 9), render)
        return html

    assert asyncio.run(scenario()) == "<li>again</li>"

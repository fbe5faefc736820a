"""The live-latency floor: a bare channel-layer ``group_send`` round trip, in its own process.

``python -m benchmarks._channel_floor`` sets Django up the way a web process does
(``REDIS_URL`` set: channels_redis pub/sub; empty: the in-memory layer, with the
project's capacity). For each line ``COUNT`` on its stdin it adds one receiver
channel to a new group and times ``group_send`` -> ``receive`` ``COUNT`` times, one
message in flight, and prints the p50 and p99 in milliseconds as a JSON line. One
process serves every run, so its start-up is paid once. For Redis the sender is a second layer
instance (its own connection), as the relay's process and a browser's process
are; in memory both ends share the one layer, as in the embedded server.

This is the part of a live update the project cannot make faster: what is left of
the figure above it is the relay, the database, rendering and the websocket.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any

WARM_UP = 50
MAX_SECONDS = 10.0


async def round_trips(count: int) -> list[float]:
    from channels.layers import InMemoryChannelLayer, channel_layers, get_channel_layer

    receiver = get_channel_layer()
    assert receiver is not None, "CHANNEL_LAYERS is not configured"
    in_memory = isinstance(receiver, InMemoryChannelLayer)
    sender: Any = receiver if in_memory else channel_layers.make_backend("default")
    group, channel = f"bench-floor-{uuid.uuid4().hex[:8]}", await receiver.new_channel()
    await receiver.group_add(group, channel)
    arrivals: asyncio.Queue[float] = asyncio.Queue()

    async def listen() -> None:  # a consumer's receive loop, minus the consumer
        while True:
            await receiver.receive(channel)
            arrivals.put_nowait(time.perf_counter())

    listener = asyncio.create_task(listen())
    samples: list[float] = []
    deadline = time.monotonic() + MAX_SECONDS
    try:
        for n in range(WARM_UP + count):
            if time.monotonic() > deadline:
                break
            sent = time.perf_counter()
            message = {"type": "saga.event", "project": 1, "log_id": n, "prev": n - 1, "saga_pk": n}
            await sender.group_send(group, message)
            arrived = await asyncio.wait_for(arrivals.get(), timeout=5)
            if n >= WARM_UP:
                samples.append(1e3 * (arrived - sent))
    finally:
        listener.cancel()
        await receiver.group_discard(group, channel)
    return samples


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sagaboard.config.settings")
    django.setup()
    for line in sys.stdin:
        samples = asyncio.run(round_trips(int(line)))
        found = {"p50": pct(samples, 0.5), "p99": pct(samples, 0.99), "n": len(samples)}
        print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()

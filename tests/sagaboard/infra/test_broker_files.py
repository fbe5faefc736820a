"""The embedded broker (infra/broker_files.py): a worker never reads a message half-written."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection

from sagaboard.infra import broker_files


@pytest.fixture
def folder_broker(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """A producer and a worker-side consumer on one folder, as the web process and the worker."""
    (tmp_path / "control").mkdir()  # the exchange's bindings (kombu's default: ./control)
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path),
               "control_folder": str(tmp_path / "control")}  # fmt: skip
    with (
        Connection("filesystem://", transport=broker_files.Transport,
                   transport_options=options) as producer,
        Connection("filesystem://", transport=broker_files.Transport,
                   transport_options=options) as worker,
    ):  # fmt: skip
        # A queue name of the test's own: kombu keeps declared bindings in class-level state,
        # so a second test reusing a name would skip writing them to its new control folder.
        name = f"tasks-{uuid.uuid4().hex[:8]}"
        yield producer.SimpleQueue(name), worker.SimpleQueue(name)


def test_a_message_being_written_is_not_seen_by_a_polling_worker(
    folder_broker: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    outbox, inbox = folder_broker
    seen_while_writing: list[str] = []
    real_open = open

    class Writing:
        """The message file, polled by the worker in the middle of the write."""

        def __init__(self, *args: Any) -> None:
            self.file = real_open(*args)

        def __enter__(self) -> Writing:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def write(self, data: bytes) -> int:
            try:
                inbox.get_nowait()
                seen_while_writing.append("a message")
            except inbox.Empty:
                seen_while_writing.append("nothing")
            return int(self.file.write(data))

    monkeypatch.setattr(broker_files, "open", Writing, raising=False)
    outbox.put({"task": "rollback_continue", "saga": 7})

    assert seen_while_writing == ["nothing"]
    message = inbox.get(timeout=5)
    assert message.payload == {"task": "rollback_continue", "saga": 7}
    message.ack()


def test_every_message_arrives_whole_and_once(folder_broker: tuple[Any, Any]) -> None:
    outbox, inbox = folder_broker
    for n in range(3):
        outbox.put({"n": n, "body": "x" * 10_000})
    received = []
    for _ in range(3):
        message = inbox.get(timeout=5)
        received.append(message.payload["n"])
        assert message.payload["body"] == "x" * 10_000
        message.ack()
    assert sorted(received) == [0, 1, 2]  # within one millisecond kombu's order is random
    with pytest.raises(inbox.Empty):
        inbox.get_nowait()

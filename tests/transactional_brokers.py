"""A broker with transactions on, for a test module, and what a topic holds as the official
client reads it: the transaction tests' common ground."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from standalone import Standalone

TXN_ON = "transactionCoordinatorEnabled=true"


def module_broker(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Standalone]:
    """The body of a module-scoped fixture: a broker with a transaction coordinator."""
    broker = Standalone(tmp_path_factory.mktemp(name) / "data", [TXN_ON]).start()
    yield broker
    broker.stop()


def read_all_official(url: str, topic: str) -> list[bytes]:
    """Every message a reader from the earliest gets now (committed ones only)."""
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(10_000).data())
        return got
    finally:
        client.close()

"""A broker with transactions on, for a test module, and what a topic holds as the official
client reads it: the transaction tests' common ground."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator

import pulsar
import pytest
from standalone import Standalone

import magnetar.client

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


def consumer(kind: str, url: str, topic: str, subscription: str):
    """(client, consumer) of the official client or magnetar.client, from the earliest message."""
    if kind == "official":
        client = pulsar.Client(url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    else:
        client = magnetar.client.Client(url, operation_timeout_seconds=10)
    return client, client.subscribe(topic, subscription, initial_position=pulsar.InitialPosition.Earliest)


def read_until(consumer, expected: set[bytes], quiet_ms: int = 300) -> list[tuple[bytes, object]]:
    """What the consumer receives (acknowledged) until it has every one of `expected` and then
    stays quiet for `quiet_ms`: a message that should not come has had its chance."""
    got: list[tuple[bytes, object]] = []
    while True:
        try:
            message = consumer.receive(10_000 if not expected <= {value for value, _ in got} else quiet_ms)
        except Exception:  # Timeout, in either client's spelling
            return got
        got.append((message.data(), message.message_id()))
        consumer.acknowledge(message)


def kill_while(broker: Standalone, produce: Callable[[threading.Event], None], rng: random.Random,
               seconds: tuple[float, float]) -> None:
    """`produce(stop)` runs in a thread until `stop` is set (or the broker is gone); the broker
    is SIGKILLed at a random moment within `seconds` of its start, and started again once the
    thread is done."""
    stop = threading.Event()
    producing = threading.Thread(target=produce, args=(stop,))
    producing.start()
    stop.wait(rng.uniform(*seconds))
    broker.kill()
    stop.set()
    producing.join(60)
    assert not producing.is_alive()
    broker.start()

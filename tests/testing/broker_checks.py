"""What the tests of magnetar.testing check a broker with: a round trip with the official
client, and that nothing of a closed broker is left."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pulsar

from magnetar.testing import StandaloneBroker


def broker_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("magnetar-test-broker")]


def refuses_connections(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


def topic_name() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:12]}"


def official_client(broker: StandaloneBroker) -> pulsar.Client:
    return pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def produce(client: pulsar.Client, topic: str, count: int) -> list[bytes]:
    """Default producer options (batching on), many keys per batch."""
    producer = client.create_producer(topic)
    values = [f"{i}-{random.random()}".encode() for i in range(count)]
    for i, value in enumerate(values):
        producer.send_async(value, None, partition_key=f"key-{i % 7}")
    producer.flush()
    producer.close()
    return values


def consume(consumer: pulsar.Consumer, count: int) -> list[bytes]:
    got = []
    for _ in range(count):
        msg = consumer.receive(10_000)
        consumer.acknowledge(msg)
        got.append(msg.data())
    return got


def consume_all(consumer: pulsar.Consumer, values: list[bytes]) -> set[bytes]:
    """Until every value came (a restart may deliver some twice), or 10 s without one."""
    got: set[bytes] = set()
    with contextlib.suppress(pulsar.Timeout):
        while not got >= set(values):
            got.add(consume(consumer, 1)[0])
    return got


def assert_gone(broker: StandaloneBroker, service_url: str, admin_url: str, data_dir: Path) -> None:
    assert not data_dir.exists()
    assert not broker_threads()
    assert refuses_connections(service_url) and refuses_connections(admin_url)

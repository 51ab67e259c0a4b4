"""Large entries on the dispatch path: read from the ledger files on their own (the entry
cache is off here), written after their MESSAGE header apart from it, and straight to the
socket when it takes them. Both clients must get every byte, with the broker's entry
metadata stripped or exposed; and dispatcherMaxReadSizeBytes bounds what one read sends."""

from __future__ import annotations

import json

import pulsar
import pytest
from admin_http import get_json
from polling import wait_for

import magnetar.client as mc
import magnetar.testing

INTERCEPTORS = [
    "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor",
    "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor",
]
#: Around the 64 KiB mark where entries are read and written apart, and well past it.
SIZES = [5, 1 << 20, 65_535, 65_536, 70_000, 0, 3 << 20, 17]


def payload(i: int, size: int) -> bytes:
    return (bytes([i]) + bytes(range(256)) * (size // 256 + 1))[:size]


@pytest.fixture(scope="module", params=[False, True], ids=["stripped", "exposed"])
def large_broker(request):
    config = {"managedLedgerCacheSizeMB": 0, "brokerEntryMetadataInterceptors": INTERCEPTORS,
              "exposingBrokerEntryMetadataToClientEnabled": request.param}
    with magnetar.testing.standalone(config) as broker:
        yield broker


@pytest.fixture(scope="module")
def topic(large_broker) -> str:
    """One topic of SIZES entries, written unbatched by the official client."""
    client = pulsar.Client(large_broker.service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    name = "persistent://public/default/large-entries"
    producer = client.create_producer(name, batching_enabled=False)
    for i, size in enumerate(SIZES):
        producer.send(payload(i, size))
    client.close()
    return name


def test_the_official_client_gets_every_byte(large_broker, topic, client_factory):
    client = client_factory(large_broker.service_url)
    reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=3)
    got = [reader.read_next(10_000).data() for _ in SIZES]
    assert [len(data) for data in got] == SIZES
    assert got == [payload(i, size) for i, size in enumerate(SIZES)]


def test_magnetar_client_gets_every_byte(large_broker, topic):
    client = mc.Client(large_broker.service_url, operation_timeout_seconds=10)
    try:
        reader = client.create_reader(topic, mc.MessageId.earliest, receiver_queue_size=3)
        got = [reader.read_next(10_000).data() for _ in SIZES]
    finally:
        client.close()
    assert [len(data) for data in got] == SIZES
    assert got == [payload(i, size) for i, size in enumerate(SIZES)]


def test_a_read_pass_sends_no_more_than_dispatcher_max_read_size_bytes(broker_factory, client_factory):
    """Permits count messages: a queue of 1,000 could take a hundred batches of 1,000 in one
    read of dispatcherMaxReadBatchSize entries. A read stops at the byte bound (but takes
    one entry at least), so here one batch goes out and the consumer's permits are spent."""
    broker = broker_factory("dispatcherMaxReadSizeBytes=1")
    client = client_factory(broker.url)
    topic = "persistent://public/default/read-size"
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                      batching_max_publish_delay_ms=60_000)
    for _ in range(5):
        for _ in range(1000):
            producer.send_async(b"m" * 100, None)
        producer.flush()
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest,
                                receiver_queue_size=1000)
    consumer.receive(10_000)
    stats_url = f"{broker.admin_url}/admin/v2/persistent/public/default/read-size/stats"

    def consumer_stats() -> dict:
        return get_json(stats_url)["subscriptions"]["sub"]["consumers"][0]  # type: ignore[index]

    assert wait_for(lambda: consumer_stats()["msgOutCounter"] > 0, timeout=10)
    stats = consumer_stats()
    assert (stats["msgOutCounter"], stats["availablePermits"]) == (1000, 0), json.dumps(stats)

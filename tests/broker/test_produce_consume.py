"""Produce and consume through a real standalone with the official client."""

from __future__ import annotations

import pulsar
import pytest

COMPRESSIONS = [
    pulsar.CompressionType.NONE,
    pulsar.CompressionType.LZ4,
    pulsar.CompressionType.ZLib,
    pulsar.CompressionType.ZSTD,
    pulsar.CompressionType.SNAPPY,
]


def drain(consumer: pulsar.Consumer, count: int, timeout_ms: int = 10000) -> list[pulsar.Message]:
    messages = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=timeout_ms)
        consumer.acknowledge(msg)
        messages.append(msg)
    return messages


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: str(c).rsplit(".", 1)[-1])
def test_round_trip(client, batching, compression):
    topic = f"persistent://public/default/rt-{batching}-{compression}"
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic, batching_enabled=batching, compression_type=compression, batching_max_messages=50
    )
    payloads = [f"message-{i}-".encode() * (i % 7 + 1) for i in range(200)]
    for i, payload in enumerate(payloads):
        producer.send_async(payload, None, properties={"i": str(i)}, partition_key=f"k{i % 5}")
    producer.flush()
    received = drain(consumer, len(payloads))
    assert [m.data() for m in received] == payloads
    assert [m.properties()["i"] for m in received] == [str(i) for i in range(200)]
    assert [m.partition_key() for m in received] == [f"k{i % 5}" for i in range(200)]
    if batching:
        assert any(m.message_id().batch_index() > 0 for m in received)


def test_metadata_round_trips(client):
    topic = "meta-round-trip"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, producer_name="named-producer")
    msg_id = producer.send(
        b"payload", properties={"a": "1", "b": "2"}, partition_key="key-1", ordering_key="ord-1",
        event_timestamp=1700000000123,
    )
    msg = consumer.receive(timeout_millis=10000)
    assert msg.data() == b"payload"
    assert msg.properties() == {"a": "1", "b": "2"}
    assert msg.partition_key() == "key-1"
    assert msg.ordering_key() == "ord-1"
    assert msg.event_timestamp() == 1700000000123
    assert msg.publish_timestamp() > 0
    assert msg.message_id() == msg_id
    assert producer.producer_name() == "named-producer"


def test_generated_producer_names_are_unique(client):
    names = {client.create_producer("gen-names").producer_name() for _ in range(3)}
    assert len(names) == 3


def test_empty_and_large_payloads(client):
    topic = "sizes"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    big = bytes(range(256)) * 4000  # ~1 MB
    producer.send(b"")
    producer.send(big)
    assert consumer.receive(timeout_millis=10000).data() == b""
    assert consumer.receive(timeout_millis=10000).data() == big

"""Acknowledgements and redelivery: nack, disconnect, cumulative, batch-index."""

from __future__ import annotations

import pulsar
import pytest

EARLIEST = pulsar.InitialPosition.Earliest


def test_negative_ack_redelivers_with_count(client):
    topic = "nack"
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic)
    producer.send(b"retry-me")
    first = consumer.receive(timeout_millis=10000)
    assert first.redelivery_count() == 0
    consumer.negative_acknowledge(first)
    again = consumer.receive(timeout_millis=10000)
    assert again.data() == b"retry-me"
    assert again.redelivery_count() == 1
    consumer.acknowledge(again)


def test_exclusive_negative_ack_rewinds(client):
    topic = "nack-exclusive"
    consumer = client.subscribe(topic, "sub", negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"{i}".encode())
    msgs = [consumer.receive(timeout_millis=10000) for _ in range(3)]
    consumer.acknowledge(msgs[0])
    consumer.negative_acknowledge(msgs[1])
    consumer.acknowledge(msgs[2])
    again = consumer.receive(timeout_millis=10000)
    assert again.data() == b"1"
    assert again.redelivery_count() >= 1


def test_unacked_messages_go_to_another_consumer_on_disconnect(client_factory, broker):
    topic = "disconnect"
    first_client = client_factory(broker.url)
    second_client = client_factory(broker.url)
    first = first_client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = second_client.create_producer(topic)
    for i in range(5):
        producer.send(f"{i}".encode())
    received = [first.receive(timeout_millis=10000) for _ in range(5)]
    first.acknowledge(received[0])
    first.acknowledge(received[1])
    first.close()
    second = second_client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    redelivered = sorted(second.receive(timeout_millis=10000).data() for _ in range(3))
    assert redelivered == [b"2", b"3", b"4"]
    with pytest.raises(pulsar.Timeout):
        second.receive(timeout_millis=500)


def test_cumulative_ack(client):
    topic = "cumulative"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"{i}".encode())
    msgs = [consumer.receive(timeout_millis=10000) for _ in range(10)]
    consumer.acknowledge_cumulative(msgs[6])
    consumer.close()
    consumer = client.subscribe(topic, "sub")
    assert [consumer.receive(timeout_millis=10000).data() for _ in range(3)] == [b"7", b"8", b"9"]


def test_cumulative_ack_refused_on_shared(client):
    consumer = client.subscribe("cumulative-shared", "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer("cumulative-shared")
    producer.send(b"x")
    msg = consumer.receive(timeout_millis=10000)
    with pytest.raises(pulsar.CumulativeAcknowledgementNotAllowedError):
        consumer.acknowledge_cumulative(msg)


def test_batch_index_ack_redelivers_only_unacked(client):
    topic = "batch-index-ack"
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                batch_index_ack_enabled=True, negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=4,
                                      batching_max_publish_delay_ms=1000)
    for i in range(4):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    msgs = [consumer.receive(timeout_millis=10000) for _ in range(4)]
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in msgs}) == 1
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[2])
    consumer.close()  # flushes the batch-index acks; 1 and 3 stay unacked
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True)
    again = sorted(consumer.receive(timeout_millis=10000).data() for _ in range(2))
    assert again == [b"1", b"3"]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=500)


def test_unsubscribe_removes_subscription(client):
    topic = "unsubscribe"
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub")
    producer.send(b"before")
    consumer.unsubscribe()
    producer.send(b"after")
    fresh = client.subscribe(topic, "sub")  # a new subscription starts at Latest
    producer.send(b"new")
    assert fresh.receive(timeout_millis=10000).data() == b"new"

"""Readers (non-durable subscriptions), last message id and seek."""

from __future__ import annotations

import time

import pulsar
import pytest


def fill(client, topic: str, count: int, **kwargs) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, **kwargs)
    ids = [producer.send(f"{i}".encode()) for i in range(count)]
    producer.close()
    return ids


def read_all(reader) -> list[bytes]:
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=10000).data())
    return got


def test_reader_from_earliest(client):
    fill(client, "r-earliest", 10)
    reader = client.create_reader("r-earliest", pulsar.MessageId.earliest)
    assert read_all(reader) == [f"{i}".encode() for i in range(10)]


def test_reader_from_latest_sees_only_new(client):
    fill(client, "r-latest", 3)
    reader = client.create_reader("r-latest", pulsar.MessageId.latest)
    assert not reader.has_message_available()
    fill(client, "r-latest", 1)
    assert reader.has_message_available()
    assert reader.read_next(timeout_millis=10000).data() == b"0"


def test_reader_from_message_id_exclusive_and_inclusive(client):
    ids = fill(client, "r-id", 10)
    exclusive = client.create_reader("r-id", ids[4])
    assert read_all(exclusive) == [f"{i}".encode() for i in range(5, 10)]
    inclusive = client.create_reader("r-id", ids[4], start_message_id_inclusive=True)
    assert read_all(inclusive) == [f"{i}".encode() for i in range(4, 10)]


def test_reader_from_batch_message_id(client):
    producer = client.create_producer("r-batch", batching_enabled=True, batching_max_messages=5,
                                      batching_max_publish_delay_ms=1000)
    for i in range(5):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    consumer = client.subscribe("r-batch", "s", initial_position=pulsar.InitialPosition.Earliest)
    ids = [consumer.receive(timeout_millis=10000).message_id() for _ in range(5)]
    reader = client.create_reader("r-batch", ids[2])
    assert read_all(reader) == [b"3", b"4"]


def test_has_message_available_on_empty_topic(client):
    reader = client.create_reader("r-empty", pulsar.MessageId.earliest)
    assert not reader.has_message_available()


def test_has_message_available_after_last_of_batch(client):
    producer = client.create_producer("r-last-batch", batching_enabled=True, batching_max_messages=3,
                                      batching_max_publish_delay_ms=1000)
    for i in range(3):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    reader = client.create_reader("r-last-batch", pulsar.MessageId.earliest)
    assert read_all(reader) == [b"0", b"1", b"2"]
    assert not reader.has_message_available()


def test_get_last_message_id(client):
    ids = fill(client, "last-id", 3)
    consumer = client.subscribe("last-id", "sub")
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(), ids[-1].entry_id())


def test_consumer_seek_by_message_id(client):
    ids = fill(client, "seek-id", 10)
    consumer = client.subscribe("seek-id", "sub", initial_position=pulsar.InitialPosition.Earliest)
    for _ in range(10):
        consumer.acknowledge(consumer.receive(timeout_millis=10000))
    consumer.seek(ids[5])
    assert [consumer.receive(timeout_millis=10000).data() for _ in range(4)] == [b"6", b"7", b"8", b"9"]


def test_consumer_seek_to_earliest_replays_everything(client):
    fill(client, "seek-earliest", 5)
    consumer = client.subscribe("seek-earliest", "sub", initial_position=pulsar.InitialPosition.Earliest)
    for _ in range(5):
        consumer.acknowledge(consumer.receive(timeout_millis=10000))
    consumer.seek(pulsar.MessageId.earliest)
    assert [consumer.receive(timeout_millis=10000).data() for _ in range(5)] == [f"{i}".encode() for i in range(5)]


def test_reader_seek_by_time(client):
    producer = client.create_producer("seek-time")
    for i in range(5):
        producer.send(f"old-{i}".encode())
    boundary = int(time.time() * 1000) + 5
    while int(time.time() * 1000) <= boundary:
        time.sleep(0.001)
    for i in range(3):
        producer.send(f"new-{i}".encode())
    reader = client.create_reader("seek-time", pulsar.MessageId.earliest)
    reader.seek(boundary)
    assert read_all(reader) == [b"new-0", b"new-1", b"new-2"]
    reader.seek(0)
    assert len(read_all(reader)) == 8
    reader.seek(int(time.time() * 1000) + 60_000)
    assert not reader.has_message_available()


def test_seek_without_consumer_fails_cleanly(client):
    consumer = client.subscribe("seek-closed", "sub")
    consumer.close()
    with pytest.raises(pulsar.PulsarException):
        consumer.seek(pulsar.MessageId.earliest)

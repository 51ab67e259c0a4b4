"""Partitioned topics with the client's partitioned producers and consumers."""

from __future__ import annotations

import re

import pulsar

EARLIEST = pulsar.InitialPosition.Earliest


def test_auto_created_partitioned_topic(broker_factory, client_factory):
    broker = broker_factory("allowAutoTopicCreationType=partitioned", "defaultNumPartitions=3")
    client = client_factory(broker.url)
    topic = "persistent://public/default/parted"
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"{i}".encode(), partition_key=f"key-{i}") for i in range(60)]
    assert {mid.partition() for mid in ids} == {0, 1, 2}
    got = []
    for _ in range(60):
        msg = consumer.receive(timeout_millis=10000)
        consumer.acknowledge(msg)
        got.append(msg)
    assert sorted(int(m.data()) for m in got) == list(range(60))
    assert {m.topic_name() for m in got} == {f"{topic}-partition-{i}" for i in range(3)}
    assert {m.message_id().partition() for m in got} == {0, 1, 2}


def test_non_partitioned_by_default(client):
    assert client.get_topic_partitions("persistent://public/default/plain") == ["persistent://public/default/plain"]


def test_auto_creation_disabled_gives_topic_not_found(broker_factory, client_factory):
    broker = broker_factory("allowAutoTopicCreation=false")
    client = client_factory(broker.url)
    try:
        client.create_producer("nope")
    except pulsar.TopicNotFound:
        pass
    else:
        raise AssertionError("expected TopicNotFound")


def test_pattern_subscription(client):
    client.create_producer("persistent://public/default/pat-a").send(b"a")
    client.create_producer("persistent://public/default/pat-b").send(b"b")
    consumer = client.subscribe(re.compile("persistent://public/default/pat-.*"), "sub",
                                initial_position=EARLIEST)
    got = sorted(consumer.receive(timeout_millis=10000).data() for _ in range(2))
    assert got == [b"a", b"b"]

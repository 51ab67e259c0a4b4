"""A Kafka consumer of a compacted topic (cleanup.policy=compact) reads what Kafka's cleaner
leaves: below the compaction horizon the latest record of each key at its own offset (the
offsets between are gaps), a tombstone's key gone; from the horizon on everything. Each test
runs on both entry formats, with random keys (text and binary) and tombstones."""

from __future__ import annotations

import json
import random
import uuid

from admin_http import http
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from polling import wait_for
from seeds import fresh_seed

NAMESPACE = "public/default"


def _records(rng: random.Random, count: int) -> list[tuple[bytes, bytes | None]]:
    keys = [f"k{i}".encode() for i in range(rng.randint(3, 12))] + [bytes([0xff, i]) for i in range(3)]
    return [(rng.choice(keys), None if rng.random() < 0.15 else rng.randbytes(rng.randint(1, 40)))
            for _ in range(count)]


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    offsets: list = [None] * len(records)
    for i, (key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value,
                         on_delivery=lambda err, msg, i=i: offsets.__setitem__(i, err or msg.offset()))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert all(isinstance(offset, int) for offset in offsets), offsets
    return offsets


def _compact(broker, topic: str) -> None:
    """Compact partition 0 through the admin API (as `magnetar admin topics compact`) and wait."""
    path = f"{broker.admin_url}/admin/v2/persistent/{NAMESPACE}/{topic}-partition-0/compaction"
    status, _, body = http("PUT", path)
    assert status in (200, 204), (status, body)

    def done() -> bool:
        answer = json.loads(http("GET", path)[2])
        assert answer["status"] != "ERROR", answer
        return answer["status"] == "SUCCESS"

    assert wait_for(done, timeout=30)


def _read_all(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"v-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes, bytes | None]] = []

    def more() -> bool:
        for message in consumer.consume(100, timeout=0.2):
            assert message.error() is None, message.error()
            got.append((message.offset(), message.key(), message.value()))
        return bool(got) and got[-1][0] >= end - 1

    try:
        assert wait_for(more, timeout=30), got[-3:]
    finally:
        consumer.close()
    return got


def _create(bootstrap: str, policy: str) -> str:
    topic = f"cv-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, config={"cleanup.policy": policy})])[topic].result(timeout=30)
    return topic


def test_a_compacted_topic_is_read_as_kafkas_cleaner_leaves_it(kafka_broker) -> None:
    seed = fresh_seed()  # replay a failure with MAGNETAR_RUN_SEED=<seed>
    rng = random.Random(seed)
    topic = _create(kafka_broker.bootstrap, "compact")
    head = _records(rng, rng.randint(60, 200))
    offsets = _produce(kafka_broker.bootstrap, topic, head)
    _compact(kafka_broker, topic)
    tail = _records(rng, rng.randint(5, 30))
    tail_offsets = _produce(kafka_broker.bootstrap, topic, tail)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for (key, value), offset in zip(head, offsets, strict=True):
        latest[key] = (offset, value)
    below = sorted((offset, key, value) for key, (offset, value) in latest.items() if value is not None)
    expected = below + [(offset, key, value) for (key, value), offset in zip(tail, tail_offsets, strict=True)]
    assert _read_all(kafka_broker.bootstrap, topic, tail_offsets[-1] + 1) == expected, f"seed {seed}"


def test_a_compacted_view_with_nothing_left_below_the_horizon_still_reaches_the_end(kafka_broker) -> None:
    """Every key deleted: the compacted view is empty, and a reader goes on to the topic's end."""
    topic = _create(kafka_broker.bootstrap, "compact")
    keys = [f"gone-{i}".encode() for i in range(5)]
    offsets = _produce(kafka_broker.bootstrap, topic, [(key, b"v") for key in keys] + [(key, None) for key in keys])
    _compact(kafka_broker, topic)
    end = offsets[-1] + 1
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": f"e-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        seen: list = []
        # the tombstones after the last compaction's reach are read where the view ends
        assert wait_for(lambda: seen.extend(m for m in consumer.consume(10, 0.2) if not m.error()) or
                        consumer.position([TopicPartition(topic, 0)])[0].offset >= end, timeout=30)
    finally:
        consumer.close()


def test_a_delete_policy_topic_compacted_by_pulsar_is_read_whole(kafka_broker) -> None:
    """Pulsar's compaction of a topic whose cleanup.policy is delete serves Pulsar's compacted
    readers; Kafka consumers still read every record."""
    rng = random.Random()
    topic = _create(kafka_broker.bootstrap, "delete")
    records = _records(rng, 50)
    offsets = _produce(kafka_broker.bootstrap, topic, records)
    _compact(kafka_broker, topic)
    expected = [(offset, key, value) for (key, value), offset in zip(records, offsets, strict=True)]
    assert _read_all(kafka_broker.bootstrap, topic, offsets[-1] + 1) == expected

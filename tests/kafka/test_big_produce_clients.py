"""Requests of about 1 MB (converted over several loop turns, test_produce_turns) with real
clients and a real broker: an idempotent confluent-kafka producer and kafka-python sending at
once to one partition are read back whole, each in its own order, once; a SIGKILL while big
batches are in flight leaves every batch whole or absent after the restart."""

from __future__ import annotations

import random
import signal
import threading
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaProducer
from kafka_brokers import KafkaStandalone, RawKafka, batch, produce_request, start_kafka_broker

from magnetar.kafka.protocol.messages import encode_request

MEGABYTE = 1 << 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[KafkaStandalone]:
    """The Pulsar entry format: the one whose records are converted."""
    started = start_kafka_broker(tmp_path_factory.mktemp("big-produce"), "entryFormat=pulsar")
    yield started
    started.stop()


def _read_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "enable.auto.commit": False,
                         "fetch.max.bytes": 4 * MEGABYTE})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    idle = 0
    try:
        while len(values) < count and idle < 100:  # 100 empty polls of 0.2 s: nothing more is coming
            messages = consumer.consume(10_000, timeout=0.2)
            idle = 0 if messages else idle + 1
            for message in messages:
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_an_idempotent_producer_and_kafka_python_in_megabyte_requests_are_read_back_whole(broker) -> None:
    topic, count = "big-clients", 30_000
    confluent = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 50,
                          "batch.size": MEGABYTE, "message.max.bytes": MEGABYTE})
    python = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=50, batch_size=MEGABYTE,
                           max_request_size=MEGABYTE, acks="all")
    filler = b"." * 90

    def send_python() -> None:
        for i in range(count):
            python.send(topic, b"p-%06d" % i + filler)
        python.flush(60)

    failed: list[object] = []
    thread = threading.Thread(target=send_python)
    thread.start()
    for i in range(count):
        while True:
            try:
                confluent.produce(topic, b"c-%06d" % i + filler, on_delivery=lambda err, _m: err and failed.append(err))
                break
            except BufferError:
                confluent.poll(0.01)
        confluent.poll(0)
    assert confluent.flush(60) == 0 and not failed
    thread.join(90)
    python.close()
    values = _read_all(broker.bootstrap, topic, 2 * count)
    assert len(values) == 2 * count
    for prefix in (b"c-", b"p-"):
        assert [v[:8] for v in values if v.startswith(prefix)] == [b"%s%06d" % (prefix, i) for i in range(count)]


def test_a_sigkill_during_big_requests_leaves_whole_batches(tmp_path) -> None:
    """Big batches pipelined on one connection (acks=1), the broker killed right after the last
    is written: after the restart each batch is all there, in order, or not at all."""
    broker = start_kafka_broker(tmp_path / "data", "entryFormat=pulsar")
    try:
        topic = "whole-batches"
        raw = RawKafka(broker.bootstrap)
        raw.create_topic(topic)
        sizes = [random.randint(3_000, 9_000) for _ in range(8)]
        frames = b"".join(encode_request(0, 9, index + 1, "raw", produce_request(
            topic, batch([b"%d/%d/%d" % (index, i, size) for i in range(size)]), acks=1))
            for index, size in enumerate(sizes))
        raw.send_raw(frames)
        assert raw.receive_frame() is not None  # one batch at least was taken before the kill
        broker.stop(signal.SIGKILL)
        raw.close()
        broker.start()
        raw = RawKafka(broker.bootstrap)
        end = raw.latest(topic)
        raw.close()
        values = _read_all(broker.bootstrap, topic, end)
        assert len(values) == end >= sizes[0], "the acknowledged batch is gone"
        at, stored = 0, []
        while at < len(values):
            index, _, size = (int(part) for part in values[at].split(b"/"))
            assert values[at:at + size] == [b"%d/%d/%d" % (index, i, size) for i in range(size)], \
                f"batch {index} is not whole at offset {at}"
            stored.append(index)
            at += size
        assert stored == list(range(len(stored)))  # the batches written first, in order
    finally:
        broker.stop()

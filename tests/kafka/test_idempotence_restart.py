"""Idempotent producers across a SIGKILL and a clean restart: a retried batch is stored once."""

from __future__ import annotations

import collections
import random
import signal

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_brokers import (
    KafkaStandalone,
    RawKafka,
    batch,
    start_kafka_broker,
)
from kio.schema.errors import ErrorCode
from polling import wait_for

INTERVAL = 4  # brokerDeduplicationEntriesInterval: 10 batches leave 2 past the last snapshot
BATCHES = 10


def _librdkafka_produce(producer: Producer, topic: str, values: list[bytes]) -> None:
    errors: list[object] = []
    for value in values:
        producer.produce(topic, value=value, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(20)
    assert errors == [None] * len(values)


def _values(broker: KafkaStandalone, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False})
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []

    def read_all() -> bool:
        for message in consumer.consume(1000, timeout=0.2):
            assert message.error() is None, message.error()
            values.append(message.value())
        return len(values) >= end

    assert wait_for(read_all, timeout=30)
    consumer.close()
    return values


@pytest.mark.parametrize("entry_format", ["pulsar", "kafka"])
def test_a_batch_retried_across_a_restart_is_stored_once(tmp_path, entry_format, client_factory) -> None:
    rng = random.Random()
    broker = start_kafka_broker(tmp_path / "data", f"entryFormat={entry_format}",
                                f"brokerDeduplicationEntriesInterval={INTERVAL}")
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 1,
                             "acks": "all"})
        _librdkafka_produce(producer, "rdkafka", [b"before-%d" % i for i in range(rng.randint(1, 50))])
        raw = RawKafka(broker.bootstrap)
        raw.create_topic("retried")
        producer_id, epoch = raw.init_producer()
        batches, offsets, sequence = [], [], 0
        for number in range(BATCHES):
            values = [b"raw-%d-%d" % (number, i) for i in range(rng.randint(1, 4))]
            batches.append(batch(values, (producer_id, epoch, sequence)))
            sequence += len(values)
            error, offset = raw.produce("retried", batches[-1])
            assert error == ErrorCode.none
            offsets.append(offset)
        broker.stop(signal.SIGKILL)  # right after the last acknowledgement
        raw.close()

        broker.start()
        raw = RawKafka(broker.bootstrap)
        end = raw.latest("retried")
        last = BATCHES - 1
        recent = rng.randrange(BATCHES - 5, BATCHES - 1)  # one of the five a producer may have in flight
        for index in (last, recent):  # retries whose answers the SIGKILL took: answered with their offsets
            assert raw.produce("retried", batches[index]) == (ErrorCode.none, offsets[index])
        tail = BATCHES % INTERVAL
        assert f"rebuilt from {tail} entries past its snapshot ({tail} batches)" in broker.log()
        assert raw.produce("retried", batches[0])[0] == ErrorCode.duplicate_sequence_number
        gap = batch([b"gap"], (producer_id, epoch, sequence + 1))
        assert raw.produce("retried", gap)[0] == ErrorCode.out_of_order_sequence_number
        assert raw.latest("retried") == end
        follows = batch([b"next"], (producer_id, epoch, sequence))
        assert raw.produce("retried", follows) == (ErrorCode.none, end)
        assert raw.init_producer()[0] > producer_id  # never an id handed out before the restart
        _librdkafka_produce(producer, "rdkafka", [b"after"])  # its next sequence follows what was stored
        raw.close()
        pulsar = client_factory(broker.url).create_producer("retried")  # entries after the last Kafka batch
        sent = [b"pulsar-%d" % i for i in range(rng.randint(1, 20))]
        for value in sent:
            pulsar.send_async(value, None)
        pulsar.flush()

        broker.stop()  # a clean stop snapshots every partition to its end: nothing to replay
        broker.start()
        raw = RawKafka(broker.bootstrap)
        assert raw.produce("retried", follows) == (ErrorCode.none, end)
        assert "past its snapshot" not in broker.log()
        raw.close()
        values = _values(broker, "retried")
        assert values[end:] == [b"next", *sent]
        assert not [v for v, n in collections.Counter(values).items() if n > 1]
        producer.flush(5)
    finally:
        broker.stop()

"""A Kafka consumer of a topic Pulsar clients write transactions to (PIP-31): it sees what
a Pulsar consumer sees. Committed messages, at their offsets; aborted ones and the markers
never (served as control batches, which Kafka consumers step over); read_committed nothing
from an open transaction's first message on until it ends (the last stable offset), while
read_uncommitted reads on to the high watermark, as Kafka's consumers do."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka_brokers import KafkaStandalone, start_kafka_broker

import magnetar.client


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStandalone]:
    started = start_kafka_broker(tmp_path_factory.mktemp("kafka-txn") / "data", "transactionCoordinatorEnabled=true")
    yield started
    started.stop()


def _poll(consumer: KafkaConsumer, count: int) -> list[bytes]:
    """`count` values, or fewer when none comes within the consumer's timeout."""
    got: list[bytes] = []
    for record in consumer:
        got.append(record.value)
        if len(got) == count:
            break
    return got


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_kafka_consumers_see_committed_messages_only(broker: KafkaStandalone, isolation: str) -> None:
    topic = f"txn-kafka-{uuid.uuid4().hex[:8]}"
    with magnetar.client.Client(broker.url, enable_transaction=True, operation_timeout_seconds=10) as client:
        producer = client.create_producer(f"persistent://public/default/{topic}")
        producer.send(b"plain-1")
        for value, commit in ((b"committed", True), (b"aborted", False)):
            txn = client.new_transaction(timeout=30)
            producer.send(value + b"-a", txn=txn)
            producer.send(value + b"-b", txn=txn)
            txn.commit() if commit else txn.abort()
        producer.send(b"plain-2")
        still_open = client.new_transaction(timeout=30)
        producer.send(b"open", txn=still_open)
        producer.send(b"plain-3")  # behind the open transaction

        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                 consumer_timeout_ms=10_000, isolation_level=isolation)
        try:
            consumer.assign([KpTopicPartition(topic, 0)])
            consumer.seek_to_beginning()
            # the first four: a leak of an aborted or held message would be among them
            assert _poll(consumer, 4) == [b"plain-1", b"committed-a", b"committed-b", b"plain-2"]
            if isolation == "read_uncommitted":  # up to the high watermark, as Kafka reads
                assert _poll(consumer, 2) == [b"open", b"plain-3"]
                still_open.commit()
            else:
                assert not consumer.poll(timeout_ms=500)  # nothing of the open transaction, nor behind it
                still_open.commit()
                assert _poll(consumer, 2) == [b"open", b"plain-3"]
            assert not consumer.poll(timeout_ms=300)  # the commit marker is no record
        finally:
            consumer.close()

"""Issue 47 item 2: read_committed consumers of every client library over Kafka transactions
committed and aborted back to back.

Aborted records are served as control batches over their offsets, which each client steps
over, and the answer lists the aborted transactions too: each must get exactly the committed
records, in order, each once. EndTxn is answered before the markers
are written; the producer's next transaction waits for them.
Readers: confluent-kafka (librdkafka), kafka-python, aiokafka and kafkajs (Node.js).
"""

from __future__ import annotations

import random
import uuid

import pytest
from committed_readers import READER_IDS, READERS
from confluent_kafka import Producer
from kafka.record.default_records import DefaultRecordBatch
from kafka_brokers import KafkaStandalone, RawKafka
from kafka_in_process import fetch_request


@pytest.fixture(scope="module")
def broker(txn_broker: KafkaStandalone) -> KafkaStandalone:
    return txn_broker


@pytest.fixture(scope="module")
def written(broker: KafkaStandalone) -> tuple[str, list[bytes]]:
    """A topic with transactions of 1-5 records, each committed or aborted at random, one
    right after the other (batched: linger.ms=5); the committed values in order."""
    seed = random.randrange(1 << 32)
    print(f"seed {seed}")  # to replay a failure
    chooser = random.Random(seed)
    topic = f"rc-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"rc-{topic}",
                         "linger.ms": 5})
    producer.init_transactions(20)
    committed: list[bytes] = []
    outcomes = [True, False] + [chooser.random() < 0.5 for _ in range(10)]
    chooser.shuffle(outcomes)
    for number, commit in enumerate(outcomes):
        producer.begin_transaction()
        values = [b"%s-%d-%d" % (b"c" if commit else b"a", number, i) for i in range(chooser.randint(1, 5))]
        for value in values:
            producer.produce(topic, value)
        if commit:
            producer.commit_transaction(10)
            committed += values
        else:
            producer.flush(10)  # stored, then aborted
            producer.abort_transaction(10)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"last")  # outside any transaction, after every transaction's records
    plain.flush(10)
    return topic, [*committed, b"last"]


@pytest.mark.parametrize("read", READERS, ids=READER_IDS)
def test_read_committed_gets_exactly_the_committed_records(broker: KafkaStandalone, written, read) -> None:
    topic, committed = written
    assert read(broker.bootstrap, topic, len(committed)) == committed


def test_a_producers_next_transaction_is_stored_after_its_last_ones_marker(broker: KafkaStandalone,
                                                                          written) -> None:
    """EndTxn is answered before the markers, but the producer's next transaction waits for them:
    read_uncommitted, where markers (and aborted records) are control batches, a control batch
    stands between the records of any two of its transactions."""
    topic, committed = written
    raw = RawKafka(broker.bootstrap)
    try:
        (answer,) = raw.call(1, 12, fetch_request(topic, {0: 0}, max_bytes=1 << 24,
                                                  partition_max_bytes=1 << 24)).responses[0].partitions
    finally:
        raw.close()
    records, last_transaction, marker_since = bytes(answer.records or b""), None, True
    seen = []
    while records:
        size = int.from_bytes(records[8:12], "big") + 12
        batch, records = DefaultRecordBatch(bytearray(records[:size])), records[size:]
        if batch.is_control_batch:
            marker_since = True
            continue
        for record in batch:
            seen.append(record.value)
            transaction = record.value.split(b"-")[1] if record.value != b"last" else None
            if transaction is not None and transaction != last_transaction:
                assert marker_since, f"{record.value!r} stored before the marker of transaction {last_transaction!r}"
                last_transaction, marker_since = transaction, False
    assert seen == committed

"""Payload processors (PIP-96) against a real broker: Kafka and Arrow entries beside Pulsar batches."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

import pyarrow as pa
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from polling import wait_for

import magnetar.client as mc
from magnetar.client.columnar import EntryFailure
from magnetar.client.entries import entry_metadata
from magnetar.formats import PayloadProcessor
from magnetar.formats.columns import ARROW_SCHEMA
from magnetar.wire.entry import FORMAT_PROPERTY

KAFKA = {"properties": {FORMAT_PROPERTY: "kafka"}}


def _kafka_batch(values, codec: int = 1) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=1_000 + offset, key=b"key-%d" % offset, value=value,
                       headers=[("origin", b"kafka")])
    return bytes(builder.build())


@pytest.fixture
def client(shared_broker):
    handle = mc.Client(shared_broker.service_url, operation_timeout_seconds=10)
    yield handle
    handle.close()


def _mixed_topic(client, topic: str) -> None:
    """Two Pulsar batches, a Kafka entry, an Arrow entry, in that order."""
    producer = client.create_producer(topic, batching_enabled=True)
    for i in range(2):
        producer.send_async(b"pulsar-%d" % i, None, partition_key="pk")
    producer.flush()
    producer.send_entry(_kafka_batch([b"kafka-0", None, b"kafka-2"]), KAFKA, 3)
    producer.send_arrow(pa.table({"value": [b"arrow-0", b"arrow-1"], "key": ["a", None],
                                  "event_time": [7, 8]}))
    producer.close()


def test_a_consumer_reads_pulsar_kafka_and_arrow_entries_of_one_topic(client, topic) -> None:
    consumer = client.subscribe(topic, "s", payload_processor=["kafka", "arrow"])
    _mixed_topic(client, topic)
    got = [consumer.receive(5000) for _ in range(7)]
    assert [m.data() for m in got] == [b"pulsar-0", b"pulsar-1", b"kafka-0", b"", b"kafka-2", b"arrow-0", b"arrow-1"]
    kafka = got[2:5]
    assert [m.partition_key() for m in kafka] == ["key-0", "key-1", "key-2"]
    assert [m.event_timestamp() for m in kafka] == [1000, 1001, 1002]
    assert [m.has_null_value() for m in kafka] == [False, True, False]
    assert kafka[0].properties() == {"origin": "kafka"}
    ids = [m.message_id() for m in got]
    assert [i.batch_index() for i in ids] == [0, 1, 0, 1, 2, 0, 1]
    assert len({(i.ledger_id(), i.entry_id()) for i in ids}) == 3
    assert [m.index() for m in got] == list(range(got[0].index(), got[0].index() + 7))  # PIP-70 per message
    assert got[5].partition_key() == "a" and got[5].event_timestamp() == 7


def test_acks_by_batch_index_hold_for_kafka_entries(client, topic) -> None:
    consumer = client.subscribe(topic, "s", payload_processor="kafka", batch_index_ack_enabled=True,
                                consumer_type=mc.ConsumerType.Shared)
    producer = client.create_producer(topic)
    producer.send_entry(_kafka_batch([b"v0", b"v1", b"v2"]), KAFKA, 3)
    first = [consumer.receive(5000) for _ in range(3)]
    consumer.acknowledge(first[0])
    consumer.acknowledge(first[2])
    consumer.close()
    again = client.subscribe(topic, "s", payload_processor="kafka", batch_index_ack_enabled=True,
                             consumer_type=mc.ConsumerType.Shared)
    redelivered = again.receive(5000)
    assert redelivered.data() == b"v1" and redelivered.message_id().batch_index() == 1
    with pytest.raises(mc.Timeout):
        again.receive(300)


def test_seek_to_a_message_of_a_kafka_entry(client, topic) -> None:
    producer = client.create_producer(topic)
    first = producer.send_entry(_kafka_batch([b"v0", b"v1", b"v2"]), KAFKA, 3)
    reader = client.create_reader(topic, first, payload_processor="kafka")
    assert [reader.read_next(5000).data() for _ in range(2)] == [b"v1", b"v2"]


def test_without_a_processor_pulsar_entries_read_as_before_and_a_kafka_entry_fails_by_name(client, topic) -> None:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before", properties={"a": "b"})
    producer.send_entry(_kafka_batch([b"x"]), KAFKA, 1)
    producer.send(b"after")
    before = consumer.receive(5000)
    assert before.data() == b"before" and before.properties() == {"a": "b"}
    assert before.message_id().batch_index() == -1
    with pytest.raises(EntryFailure, match=r"format 'kafka'.*payload_processor='kafka'"):
        consumer.receive(5000)
    assert consumer.receive(5000).data() == b"after"


def test_a_corrupt_kafka_payload_is_one_clear_error_and_the_consumer_goes_on(client, topic) -> None:
    consumer = client.subscribe(topic, "s", payload_processor="kafka")
    producer = client.create_producer(topic)
    bad = bytearray(_kafka_batch([b"x", b"y"], codec=0))
    bad[-2] ^= 0xFF  # the Pulsar checksum covers these bytes as sent; Kafka's own CRC32C does not match
    producer.send_entry(_kafka_batch([b"ok-0"]), KAFKA, 1)
    with pytest.raises(mc.InvalidConfiguration, match="not a valid kafka payload"):
        producer.send_entry(bytes(bad), KAFKA, 2)  # the producer checks what it can

    async def unchecked() -> None:  # a writer that does not check (Kafka-on-Pulsar, a raw protocol client)
        await producer._core._send_whole(entry_metadata(KAFKA, 2), bytes(bad), 2)

    client._run(unchecked())
    producer.send_entry(_kafka_batch([b"ok-1"]), KAFKA, 1)
    assert consumer.receive(5000).data() == b"ok-0"
    with pytest.raises(EntryFailure, match="corrupt kafka payload: CRC32C mismatch"):
        consumer.receive(5000)
    assert consumer.receive(5000).data() == b"ok-1"


def test_send_entry_refuses_a_wrong_count(client, topic) -> None:
    producer = client.create_producer(topic)
    with pytest.raises(mc.InvalidConfiguration, match="num_messages=2 but the kafka payload holds 3"):
        producer.send_entry(_kafka_batch([b"a", b"b", b"c"]), KAFKA, 2)
    with pytest.raises(mc.InvalidConfiguration, match="num_messages must be a positive int"):
        producer.send_entry(b"whatever", {"properties": {FORMAT_PROPERTY: "avro"}}, 0)
    # a format no built-in reader knows: the count is the writer's word
    producer.send_entry(b"opaque", {"properties": {FORMAT_PROPERTY: "avro"}}, 5)


class Recording(PayloadProcessor):
    """A catch-all processor (the Java shape) that keeps what it was handed and defers to Pulsar's format."""

    def __init__(self) -> None:
        self.seen = []

    def messages(self, entry, context):
        self.seen.append((entry.broker_entry_metadata, entry.metadata, context.num_messages))
        return context.default_messages()


def test_a_processor_gets_the_real_broker_entry_metadata_and_message_metadata(client, topic) -> None:
    recording = Recording()
    consumer = client.subscribe(topic, "s", payload_processor=recording)
    producer = client.create_producer(topic, batching_enabled=True, producer_name="who")
    for i in range(3):
        producer.send_async(b"m%d" % i, None)
    producer.flush()
    got = [consumer.receive(5000) for _ in range(3)]
    assert [m.data() for m in got] == [b"m0", b"m1", b"m2"]
    ((bem, metadata, count),) = recording.seen
    assert bem.index == got[-1].index() and bem.broker_timestamp == got[0].broker_publish_time()
    assert metadata.producer_name == "who" and metadata.num_messages_in_batch == count == 3


def test_a_multi_topic_consumer_picks_the_processor_per_entry(client) -> None:
    topics = [f"persistent://public/default/multi-{uuid.uuid4().hex[:8]}-{i}" for i in range(2)]
    consumer = client.subscribe(topics, "s", payload_processor="kafka,arrow")
    client.create_producer(topics[0]).send_entry(_kafka_batch([b"k0", b"k1"]), KAFKA, 2)
    client.create_producer(topics[1]).send_arrow(pa.table({"value": [b"a0"]}))
    got = sorted(consumer.receive(5000).data() for _ in range(3))
    assert got == [b"a0", b"k0", b"k1"]


def test_receive_arrow_gives_the_same_rows_for_every_format(client, topic) -> None:
    consumer = client.subscribe(topic, "s", payload_processor="kafka,arrow")
    _mixed_topic(client, topic)
    rows = []
    while sum(b.num_rows for b in rows) < 7:
        rows.append(consumer.receive_arrow(4, 5000))
    assert all(b.num_rows <= 4 for b in rows)
    table = pa.Table.from_batches(rows)
    assert table.schema == ARROW_SCHEMA
    assert table.column("value").to_pylist() == [b"pulsar-0", b"pulsar-1", b"kafka-0", b"", b"kafka-2",
                                                 b"arrow-0", b"arrow-1"]
    assert table.column("key").to_pylist() == ["pk", "pk", "key-0", "key-1", "key-2", "a", None]
    assert table.column("batch_index").to_pylist() == [0, 1, 0, 1, 2, 0, 1]
    assert table.column("event_time").to_pylist()[2:] == [1000, 1001, 1002, 7, 8]
    for batch in rows:
        consumer.acknowledge_arrow(batch)
    consumer.close()
    again = client.subscribe(topic, "s", payload_processor="kafka,arrow")
    with pytest.raises(mc.Timeout):
        again.receive_arrow(10, 300)


def test_what_the_official_client_sees_on_a_kafka_entry(shared_broker, topic) -> None:
    """Documented in docs/payload_processors.md: it has no processors; run in a child process in case it crashes."""
    client = mc.Client(shared_broker.service_url)
    producer = client.create_producer(topic)
    producer.send(b"plain-before")
    producer.send_entry(_kafka_batch([b"k0", b"k1"]), KAFKA, 2)
    producer.send(b"plain-after")
    client.close()
    script = textwrap.dedent(f"""
        import pulsar
        c = pulsar.Client({shared_broker.service_url!r}, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        r = c.create_reader({topic!r}, pulsar.MessageId.earliest)
        while True:
            try:
                m = r.read_next(3000)
            except Exception as exc:
                print("END", type(exc).__name__)
                break
            print("MSG", m.message_id(), m.data()[:20])
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    print(run.stdout, run.stderr[-2000:])
    lines = run.stdout.splitlines()
    assert lines and "plain-before" in lines[0]
    assert any("plain-after" in line for line in lines)  # the foreign entry does not stop it



def test_send_arrow_numbers_rows_from_a_given_sequence_id(client, topic) -> None:
    """What the Spark sink's exactly-once Arrow entries rest on: the caller numbers the rows."""
    producer = client.create_producer(topic, producer_name="numbered")
    ids = producer.send_arrow_async(pa.table({"value": [b"r0", b"r1", b"r2"]}), 2, 100).result(10)
    assert len(ids) == 2  # two entries: rows 100-101 and 102
    assert producer.last_sequence_id() == 102
    producer.close()
    reader = client.create_reader(topic, mc.MessageId.earliest, payload_processor="arrow")
    assert [reader.read_next(5000).data() for _ in range(3)] == [b"r0", b"r1", b"r2"]


def test_acknowledge_cumulative_arrow_survives_a_restart(broker_factory, topic) -> None:
    """A cumulative ack ending inside an entry stops before that entry (no batch-index acks, as
    the C++ client does), so after a broker restart exactly the rows from there come back;
    one ending on an entry's last row acks the entry."""
    broker = broker_factory()
    client = mc.Client(broker.url, operation_timeout_seconds=10)
    consumer = client.subscribe(topic, "s", payload_processor="kafka,arrow")
    _mixed_topic(client, topic)
    first = consumer.receive_arrow(1, 5000)
    assert first.column("value").to_pylist() == [b"pulsar-0"]
    consumer.acknowledge_cumulative_arrow(first)  # mid Pulsar batch: nothing acked yet
    second = consumer.receive_arrow(3, 5000)
    assert second.column("value").to_pylist() == [b"pulsar-1", b"kafka-0", b""]
    consumer.acknowledge_cumulative_arrow(second)  # acks the Pulsar batch, not the Kafka entry
    consumer.close()
    client.close()
    broker.restart()
    client = mc.Client(broker.url, operation_timeout_seconds=10)
    again = client.subscribe(topic, "s", payload_processor="kafka,arrow")
    rows = again.receive_arrow(2, 5000)
    assert rows.column("value").to_pylist() == [b"kafka-0", b""]
    rest = again.receive_arrow(10, 5000)
    while rest.column("value").to_pylist()[-1] != b"arrow-1":
        rest = again.receive_arrow(10, 5000)
    again.acknowledge_cumulative_arrow(rest)
    again.close()
    last = client.subscribe(topic, "s", payload_processor="kafka,arrow")
    with pytest.raises(mc.Timeout):
        last.receive_arrow(10, 300)
    client.close()


def test_acknowledge_cumulative_arrow_is_refused_on_a_shared_subscription(client, topic) -> None:
    consumer = client.subscribe(topic, "s", payload_processor="arrow", consumer_type=mc.ConsumerType.Shared)
    client.create_producer(topic).send_arrow(pa.table({"value": [b"a0"]}))
    batch = consumer.receive_arrow(10, 5000)
    with pytest.raises(mc.CumulativeAcknowledgementNotAllowedError, match="Shared"):
        consumer.acknowledge_cumulative_arrow(batch)


@pytest.mark.parametrize("batch_index_ack", [False, True])
def test_rows_of_batches_queued_before_the_first_receive_arrow_are_acked_row_by_row(
        client, topic, batch_index_ack) -> None:
    """Batches that arrived before receive_arrow was first called were decoded as messages;
    acknowledging some of their rows acks only those (batch-index acks) or nothing of their
    entry (without, as the C++ client does), never the whole entry, across resubscriptions."""
    def subscribe() -> mc.Consumer:
        return client.subscribe(topic, "s", batch_index_ack_enabled=batch_index_ack)

    consumer = subscribe()
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=60_000)
    values = [f"m{i}".encode() for i in range(30)]  # three entries: m0-m9, m10-m19, m20-m29
    for value in values:
        producer.send_async(value, None)
    producer.flush()
    left = values
    for take in (15, 3):
        entries = len({values.index(v) // 10 for v in left})
        # The consumer's own queue (there is no public way to ask): every entry must be there,
        # decoded as messages, before this subscription's first receive_arrow.
        assert wait_for(lambda c=consumer, n=entries: len(c._queue) >= n)
        rows = consumer.receive_arrow(take, 5000)
        assert rows.column("value").to_pylist() == left[:take]
        consumer.acknowledge_arrow(rows)
        consumer.close()
        consumer = subscribe()
        last_acked = values.index(left[take - 1])
        left = values[last_acked + 1 :] if batch_index_ack else values[(last_acked + 1) // 10 * 10 :]
    assert [consumer.receive(5000).data() for _ in range(len(left))] == left
    with pytest.raises(mc.Timeout):
        consumer.receive(300)

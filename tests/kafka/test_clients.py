"""Real Kafka clients against `magnetar standalone --kafka`: librdkafka (confluent-kafka), kafka-python, kcat,
and the official pulsar-client on the same topics. Each test runs on both entry formats."""

from __future__ import annotations

import base64
import datetime
import random
import subprocess
import time
import uuid

import pulsar
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.record.default_records import DefaultRecordBatch
from kafka_brokers import RawKafka
from kio.schema.fetch.v12 import request as fetch
from polling import wait_for

from magnetar.client import Client as MagnetarClient
from magnetar.kafka.protocol.messages import decode_response, encode_request

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
_JAN_2020 = 1_577_836_800_000


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def _records(rng: random.Random, count: int) -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]:
    return [(rng.choice([None, rng.randbytes(rng.randint(0, 12))]), rng.randbytes(rng.randint(0, 300)),
             [(f"h{j}", rng.randbytes(4).hex().encode()) for j in range(rng.randint(0, 2))]) for _ in range(count)]


def _produce(bootstrap: str, topic: str, records, **config) -> list:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    delivered: list = []
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers,
                         on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
        producer.poll(0)
    assert producer.flush(30) == 0
    return delivered


def _consume(bootstrap: str, topic: str, count: int, partition: int = 0, offset: int = 0) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, offset)])
    got: list = []

    def more() -> bool:
        for message in consumer.consume(count - len(got), timeout=0.2):
            assert message.error() is None, message.error()
            got.append(message)
        return len(got) >= count

    try:
        assert wait_for(more, timeout=30), f"{len(got)} of {count} records"
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_produces_and_consumes_every_record_at_continuous_offsets(kafka_broker, codec) -> None:
    rng = random.Random()
    topic, records = _topic(), _records(rng, rng.randint(50, 400))
    delivered = _produce(kafka_broker.bootstrap, topic, records, **{"compression.type": codec})
    assert sorted(delivered) == list(range(len(records)))
    got = _consume(kafka_broker.bootstrap, topic, len(records))
    assert [m.offset() for m in got] == list(range(len(records)))
    assert [(m.key(), m.value(), m.headers() or []) for m in got] == [(k, v, h) for k, v, h in records]
    assert all(m.timestamp()[1] > 0 for m in got)


def test_a_consumer_sees_records_from_where_it_asks(kafka_broker) -> None:
    topic = _topic()
    _produce(kafka_broker.bootstrap, topic, [(None, f"v{i}".encode(), []) for i in range(30)])
    got = _consume(kafka_broker.bootstrap, topic, 10, offset=20)
    assert [(m.offset(), m.value()) for m in got] == [(20 + i, f"v{20 + i}".encode()) for i in range(10)]


def test_kafka_python_produces_and_consumes(kafka_broker) -> None:
    topic = _topic()
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, compression_type="gzip", linger_ms=5)
    futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("n", str(i).encode())])
               for i in range(100)]
    offsets = [future.get(timeout=30).offset for future in futures]
    producer.close()
    assert offsets == list(range(100))
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=20000)
    consumer.assign([KpTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = []
    for message in consumer:
        got.append((message.offset, message.key, message.value, message.headers))
        if len(got) == 100:
            break
    consumer.close()
    assert got == [(i, b"k%d" % i, b"v%d" % i, [("n", str(i).encode())]) for i in range(100)]


def test_a_long_poll_waits_for_records_and_returns_them(kafka_broker) -> None:
    """A fetch at the end with max_wait 20 s and min_bytes 1 is answered by the next append, with it."""
    topic = _topic()
    _produce(kafka_broker.bootstrap, topic, [(None, b"first", [])])
    request = fetch.FetchRequest(cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(seconds=20), min_bytes=1,
                                 max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, topics=(
                                     fetch.FetchTopic(topic=topic, partitions=(fetch.FetchPartition(
                                         partition=0, current_leader_epoch=-1, fetch_offset=1, last_fetched_epoch=-1,
                                         log_start_offset=-1, partition_max_bytes=1 << 20),)),),
                                 forgotten_topics_data=(), rack_id="")
    connection = RawKafka(kafka_broker.bootstrap)
    connection.send_raw(encode_request(1, 12, 1, "long-poll", request))  # sent before the append is
    _produce(kafka_broker.bootstrap, topic, [(None, b"second", [])])
    _, response = decode_response(connection.receive_frame(), 1, 12)
    connection.close()
    ((partition,),) = (t.partitions for t in response.responses)
    (record,) = DefaultRecordBatch(bytearray(partition.records))
    assert (partition.high_watermark, record.offset, record.value) == (2, 1, b"second")


def test_list_offsets_earliest_latest_and_by_time(kafka_broker) -> None:
    topic = _topic()
    _produce(kafka_broker.bootstrap, topic, [(None, b"a", [])] * 5)
    middle = int(time.time() * 1000) + 1
    assert wait_for(lambda: int(time.time() * 1000) > middle)
    _produce(kafka_broker.bootstrap, topic, [(None, b"b", [])] * 3)
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "lo"})
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 8)
    (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, middle)], timeout=10)
    assert found.offset == 5
    (past,) = consumer.offsets_for_times([TopicPartition(topic, 0, middle + 3_600_000)], timeout=10)
    assert past.offset in (-1, 8)  # librdkafka reports "no such offset" as -1 (OFFSET_END)
    consumer.close()


def test_kafka_python_finds_2020_records_by_their_timestamps(kafka_broker) -> None:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=0)
    for i in range(20):
        producer.send(topic, value=b"v%d" % i, timestamp_ms=_JAN_2020 + 1000 * i).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap)
    partition = KpTopicPartition(topic, 0)
    found = consumer.offsets_for_times({partition: _JAN_2020 + 5500})[partition]
    assert (found.offset, found.timestamp) == (6, _JAN_2020 + 6000)
    assert consumer.offsets_for_times({partition: _JAN_2020 + 19_001})[partition] is None
    consumer.close()


def test_kcat_produces_and_consumes_lines(kafka_broker) -> None:
    topic = _topic()
    lines = [f"line-{i}" for i in range(25)]
    subprocess.run(["kcat", "-P", "-b", kafka_broker.bootstrap, "-t", topic, "-z", "lz4"],
                   input="\n".join(lines) + "\n", text=True, check=True, timeout=60, capture_output=True)
    out = subprocess.run(["kcat", "-C", "-b", kafka_broker.bootstrap, "-t", topic, "-o", "beginning", "-e",
                          "-f", "%o %s\n"], text=True, check=True, timeout=60, capture_output=True).stdout
    assert out.splitlines() == [f"{i} line-{i}" for i in range(25)]


def test_pulsar_producers_messages_reach_kafka_consumers(kafka_broker, client_factory) -> None:
    """Batched Pulsar messages with keys, properties and event times, read as records in order."""
    topic = _topic()
    client = client_factory(kafka_broker.url)
    producer = client.create_producer(f"persistent://public/default/{topic}", batching_max_publish_delay_ms=5)
    sent = [(f"key-{i % 7}", f"value-{i}".encode(), {"n": str(i)}, 1_700_000_000_000 + i) for i in range(60)]
    for key, value, properties, event_time in sent:
        producer.send_async(value, None, partition_key=key, properties=properties, event_timestamp=event_time)
    producer.flush()
    got = _consume(kafka_broker.bootstrap, topic, len(sent))
    assert [m.offset() for m in got] == list(range(len(sent)))
    assert [(m.key().decode(), m.value(), dict((k, v.decode()) for k, v in m.headers()), m.timestamp()[1])
            for m in got] == sent


def test_kafka_producers_records_reach_pulsar_consumers(kafka_broker, client_factory) -> None:
    """entryFormat=pulsar: the official client reads them; kafka: magnetar.client's kafka processor does."""
    topic = _topic()
    pulsar_topic = f"persistent://public/default/{topic}"
    kafka_format = "entryFormat=kafka" in kafka_broker.config
    records = [(f"k{i}".encode(), f"v{i}".encode(), [("h", b"x")]) for i in range(40)]
    if kafka_format:
        client = MagnetarClient(kafka_broker.url)
        consumer = client.subscribe(pulsar_topic, "s", payload_processor="kafka",
                                    initial_position=pulsar.InitialPosition.Earliest)
    else:
        client = client_factory(kafka_broker.url)
        consumer = client.subscribe(pulsar_topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    _produce(kafka_broker.bootstrap, topic, records)
    got = []
    for _ in records:
        message = consumer.receive(timeout_millis=20000)
        got.append((message.partition_key().encode(), message.data(), sorted(message.properties().items())))
        consumer.acknowledge(message)
    client.close()
    assert got == [(k, v, [("h", "x")]) for k, v, _ in records]


def test_unbatched_compressed_pulsar_messages_reach_kafka_consumers(kafka_broker, client_factory) -> None:
    topic = _topic()
    client = client_factory(kafka_broker.url)
    producer = client.create_producer(f"persistent://public/default/{topic}", batching_enabled=False,
                                      compression_type=pulsar.CompressionType.LZ4)
    for i in range(10):
        producer.send(b"v" * i * 50, partition_key=f"k{i}")
    got = _consume(kafka_broker.bootstrap, topic, 10)
    assert [(m.offset(), m.key(), m.value()) for m in got] == [(i, f"k{i}".encode(), b"v" * i * 50)
                                                                for i in range(10)]


def test_an_idempotent_producers_records_without_headers_reach_every_reader(kafka_broker, api) -> None:
    """Records without headers are converted without a record or metadata object each
    (entryFormat=pulsar): keys text, binary or none, tombstones, values sharing sizes, from an
    idempotent librdkafka producer, read the same by a Kafka consumer and by both Pulsar clients."""
    module, make = api
    rng = random.Random()
    topic = _topic()
    records = [(rng.choice([None, b"k%d" % rng.randrange(5), b"\xff\xfe%c" % rng.randrange(256)]),
                rng.choice([None, b"", b"v" * rng.choice([3, 100]), rng.randbytes(rng.randrange(300))]), [])
               for _ in range(rng.randrange(200, 600))]
    delivered = _produce(kafka_broker.bootstrap, topic, records, **{"enable.idempotence": True})
    assert sorted(delivered) == list(range(len(records)))
    got = _consume(kafka_broker.bootstrap, topic, len(records))
    assert [(m.key(), m.value()) for m in got] == [(k, v) for k, v, _ in records]
    if "entryFormat=kafka" in kafka_broker.config:
        return  # stored as sent: no conversion to read back
    client = make(kafka_broker.url)
    consumer = client.subscribe(f"persistent://public/default/{topic}", "s",
                                initial_position=module.InitialPosition.Earliest)
    seen = []
    for _ in records:
        message = consumer.receive(timeout_millis=20000)
        seen.append((message.partition_key(), message.data(), message.properties()))
        consumer.acknowledge(message)
    expected = [("" if k is None else k.decode() if k.isascii() else base64.b64encode(k).decode(), v or b"", {})
                for k, v, _ in records]
    assert seen == expected

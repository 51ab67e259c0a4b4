"""What the Spark tests share: brokers with topics of every codec, writers, the interceptor setting.

A module of its own, not conftest.py: tests import from it, and with several conftest.py
files in the tree a bare `import conftest` would depend on collection order.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
from pyspark.sql.types import TimestampType
from standalone import Standalone

from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.wire.batch import encode_batch
from magnetar.wire.entry import add_broker_entry_metadata, build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

INTERCEPTORS = (
    "brokerEntryMetadataInterceptors=org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
    "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
)


@contextlib.contextmanager
def official_client(broker: Standalone) -> Iterator[pulsar.Client]:
    """The official client on `broker`, quiet but for errors, closed after use."""
    client = pulsar.Client(broker.url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        yield client
    finally:
        client.close()


def millis(when: object) -> int | None:
    """A timestamp column's value as the epoch milliseconds written (the inverse of PySpark's
    conversion, whatever the local time zone)."""
    return None if when is None else TimestampType().toInternal(when) // 1000


def write_entries(data_dir: Path, name: str, entries: list[dict], entries_per_ledger: int = 50_000) -> None:
    """Write entries straight into storage: each dict has `messages` (list of (value, props)),
    `broker_time` and `index` (None: no PIP-70 prefix), `batched`."""
    factory = ManagedLedgerFactory(data_dir, ManagedLedgerConfig(max_entries_per_ledger=entries_per_ledger))
    try:
        ml = factory.open(name)
        seq = 0
        for spec in entries:
            messages = spec["messages"]
            if spec.get("batched", True):
                payload = encode_batch(
                    [
                        (
                            pb.SingleMessageMetadata(
                                sequence_id=seq + i, properties=[pb.KeyValue(key=k, value=v) for k, v in props.items()]
                            ),
                            value,
                        )
                        for i, (value, props) in enumerate(messages)
                    ]
                )
                metadata = pb.MessageMetadata(
                    producer_name="w",
                    sequence_id=seq,
                    publish_time=spec.get("publish_time", 1),
                    num_messages_in_batch=len(messages),
                )
                for k, v in spec.get("batch_properties", {}).items():
                    metadata.properties.add(key=k, value=v)
            else:
                ((value, props),) = messages
                payload = value
                metadata = pb.MessageMetadata(
                    producer_name="w", sequence_id=seq, publish_time=spec.get("publish_time", 1)
                )
                for k, v in props.items():
                    metadata.properties.add(key=k, value=v)
            seq += len(messages)
            entry = build_entry(metadata, payload)
            if spec.get("index") is not None:
                bem = pb.BrokerEntryMetadata(broker_timestamp=spec["broker_time"], index=spec["index"])
                entry = add_broker_entry_metadata(entry, bem)
            ml.append_sync(entry)
    finally:
        factory.close()


COMPRESSIONS = {
    "none": pulsar.CompressionType.NONE,
    "lz4": pulsar.CompressionType.LZ4,
    "zlib": pulsar.CompressionType.ZLib,
    "zstd": pulsar.CompressionType.ZSTD,
    "snappy": pulsar.CompressionType.SNAPPY,
}


def produce(client, topic, count, *, batched, compression, key_every=3):
    """Send `count` messages; return what was sent, keyed by (ledger, entry, batch_index)."""
    producer = client.create_producer(
        topic,
        batching_enabled=batched,
        batching_max_messages=17,
        batching_max_publish_delay_ms=5,
        compression_type=compression,
    )
    sent, ids = [], []
    lock = threading.Lock()

    def done(result, msg_id, i):
        with lock:
            ids.append((i, msg_id))

    for i in range(count):
        value = f"{topic}-{i}-".encode() * (1 + i % 4)
        kwargs = {"properties": {"i": str(i)}, "event_timestamp": 1_000 + i if i % 2 else None}
        if i % key_every == 0:
            kwargs["partition_key"] = f"k{i}"
        sent.append((value, kwargs))
        producer.send_async(
            value, lambda r, m, i=i: done(r, m, i), **{k: v for k, v in kwargs.items() if v is not None}
        )
    producer.flush()
    deadline = time.monotonic() + 10
    while len(ids) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    producer.close()
    out = {}
    for i, msg_id in ids:
        value, kwargs = sent[i]
        out[(msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index())] = (i, value, kwargs)
    return out


def check_reads_while_writing(client, topic: str, read_indexes, rounds: int = 3, step: int = 50) -> None:
    """Read `rounds` times while a producer keeps writing: every read is a gapless prefix
    (no torn entry, no hole) holding at least what was receipted before it began."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1)
    stop = threading.Event()
    sent = [0]

    def write():
        while not stop.is_set():
            producer.send(b"x" * 50)
            sent[0] += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        counts = []
        for round_ in range(1, rounds + 1):
            deadline = time.monotonic() + 30
            while sent[0] < round_ * step and time.monotonic() < deadline:
                time.sleep(0.01)
            receipted = sent[0]
            indexes = sorted(read_indexes())
            assert indexes == list(range(len(indexes)))
            assert len(indexes) >= receipted
            counts.append(len(indexes))
        assert counts == sorted(counts)
    finally:
        stop.set()
        writer.join()
        producer.close()


@contextlib.contextmanager
def codec_topics(data_dir: Path, config: list[str], prefix: str) -> Iterator[tuple]:
    """A broker with `config`, holding 60 messages in a topic per (batched, compression)
    named `{prefix}-{b|n}-{codec}`; yields (broker, sent per topic, client)."""
    broker = Standalone(data_dir, config).start()
    client = pulsar.Client(
        broker.url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        topics = {}
        for batched in (True, False):
            for name, compression in COMPRESSIONS.items():
                topic = f"{prefix}-{'b' if batched else 'n'}-{name}"
                topics[topic] = produce(client, topic, 60, batched=batched, compression=compression)
        yield broker, topics, client
    finally:
        client.close()
        broker.stop()

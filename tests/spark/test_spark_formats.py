"""The Spark source reads entries of every format (PIP-96): a topic mixing Pulsar batches,
Kafka record batches (built by kafka-python) and Arrow IPC entries gives the rows the same
messages give in Pulsar's format, and the `payloadProcessor` option adds processors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from spark_helpers import millis

from magnetar.formats.arrow_ipc import encode_arrow_batches
from magnetar.spark.options import MagnetarOptionError, parse_options
from magnetar.storage import ManagedLedgerFactory
from magnetar.wire.batch import encode_batch
from magnetar.wire.entry import FORMAT_PROPERTY, build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

#: (key, value, headers, event time) per message; the same three messages in every format.
MESSAGES = [("k0", b"v0", {"h": "1"}, 1000), (None, b"v1", {}, 1001), ("k2", b"", {"a": "b"}, 1002)]
COLUMNS = ("key", "value", "properties", "event_time", "batch_index")


def _metadata(fmt: str | None, sequence: int) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence, publish_time=5,
                                  num_messages_in_batch=len(MESSAGES))
    if fmt:
        metadata.properties.add(key=FORMAT_PROPERTY, value=fmt)
    return metadata


def pulsar_entry(sequence: int) -> bytes:
    singles = []
    for key, value, headers, event_time in MESSAGES:
        single = pb.SingleMessageMetadata(event_time=event_time,
                                          properties=[pb.KeyValue(key=k, value=v) for k, v in headers.items()])
        if key is not None:
            single.partition_key = key
        singles.append((single, value))
    return build_entry(_metadata(None, sequence), encode_batch(singles))


def kafka_entry(sequence: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, (key, value, headers, event_time) in enumerate(MESSAGES):
        builder.append(offset, timestamp=event_time, key=None if key is None else key.encode(), value=value,
                       headers=[(k, v.encode()) for k, v in headers.items()])
    return build_entry(_metadata("kafka", sequence), bytes(builder.build()))


def arrow_entry(sequence: int) -> bytes:
    table = pa.table({"value": [m[1] for m in MESSAGES], "key": [m[0] for m in MESSAGES],
                      "properties": pa.array([list(m[2].items()) for m in MESSAGES],
                                             pa.map_(pa.string(), pa.string())),
                      "event_time": [m[3] for m in MESSAGES]})
    ((payload, _),) = encode_arrow_batches(table)
    return build_entry(_metadata("arrow", sequence), payload)


@pytest.fixture(scope="module")
def mixed_topic(tmp_path_factory) -> Path:
    data_dir = tmp_path_factory.mktemp("formats") / "data"
    factory = ManagedLedgerFactory(data_dir)
    try:
        ledger = factory.open("public/default/persistent/mixed")
        for sequence, build in enumerate((pulsar_entry, kafka_entry, arrow_entry, pulsar_entry)):
            ledger.append_sync(build(sequence * len(MESSAGES)))
    finally:
        factory.close()
    return data_dir


def _rows(spark, data_dir: Path, **options: str) -> list[dict]:
    reader = spark.read.format("magnetar").option("topic", "mixed")
    for key, value in options.items():
        reader = reader.option(key, value)
    rows = reader.load(str(data_dir)).orderBy("entry_id", "batch_index").collect()
    return [{**row.asDict(), "value": bytes(row["value"])} for row in rows]


def test_every_format_reads_as_its_pulsar_twin(spark, mixed_topic):
    rows = _rows(spark, mixed_topic)
    assert [r["entry_id"] for r in rows] == [e for e in range(4) for _ in MESSAGES]
    by_entry = [[{c: r[c] for c in COLUMNS} for r in rows if r["entry_id"] == e] for e in range(4)]
    assert by_entry[0] == by_entry[1] == by_entry[2] == by_entry[3]
    assert [(r["key"], r["value"], r["properties"], millis(r["event_time"])) for r in by_entry[1]] == [
        (k, v, h, t) for k, v, h, t in MESSAGES]


def test_the_payload_processor_option(spark, mixed_topic):
    named = _rows(spark, mixed_topic, payloadProcessor="kafka")
    assert named == _rows(spark, mixed_topic)  # a name resolves on the executors too
    with pytest.raises(MagnetarOptionError, match=r"payloadProcessor.*no-such-format"):
        parse_options({"path": str(mixed_topic), "topic": "mixed", "payloadProcessor": "no-such-format"})
    # a query's options never import a module: only built-ins and installed entry points
    with pytest.raises(MagnetarOptionError, match=r"payloadProcessor.*no payload processor named "
                                                  r"'magnetar.formats.kafka_records:KafkaProcessor' is installed"):
        parse_options({"path": str(mixed_topic), "topic": "mixed",
                       "payloadProcessor": "magnetar.formats.kafka_records:KafkaProcessor"})

"""The same messages written in Pulsar's, Kafka's and Arrow's format give the same rows."""

from __future__ import annotations

import pyarrow as pa

from magnetar.formats.arrow_ipc import encode_arrow_batches
from magnetar.formats.columns import ARROW_SCHEMA, int_range
from magnetar.formats.kafka_records import encode_record_batch
from magnetar.formats.table import BATCH_SIZE, SCHEMA_VERSION, TableBuilder
from magnetar.spark.rows import rows_of_entries
from magnetar.wire.batch import encode_batch
from magnetar.wire.entry import FORMAT_PROPERTY, build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

MESSAGES = [("k0", b"v0", {"h": "1"}, 1000), (None, b"v1", {}, 1001), ("k2", b"", {"a": "b", "c": "d"}, 1002)]


def _metadata(fmt: str | None) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=10, publish_time=5,
                                  num_messages_in_batch=len(MESSAGES))
    if fmt:
        metadata.properties.add(key=FORMAT_PROPERTY, value=fmt)
    return metadata


def _pulsar() -> bytes:
    singles = []
    for key, value, props, time in MESSAGES:
        single = pb.SingleMessageMetadata(event_time=time)
        if key is not None:
            single.partition_key = key
        for k, v in props.items():
            single.properties.add(key=k, value=v)
        singles.append((single, value))
    return build_entry(_metadata(None), encode_batch(singles))


def _kafka() -> bytes:
    records = [(None if k is None else k.encode(), v, [(a, b.encode()) for a, b in p.items()], t)
               for k, v, p, t in MESSAGES]
    return build_entry(_metadata("kafka"), encode_record_batch(records, codec=4))


def _arrow() -> bytes:
    table = pa.table({"value": [m[1] for m in MESSAGES], "key": [m[0] for m in MESSAGES],
                      "properties": pa.array([list(m[2].items()) for m in MESSAGES], pa.map_(pa.string(), pa.string())),
                      "event_time": [m[3] for m in MESSAGES]})
    ((payload, _),) = encode_arrow_batches(table)
    return build_entry(_metadata("arrow"), payload)


def _rows(entry: bytes) -> list[dict]:
    (batch,) = rows_of_entries([(1, 0, entry)], "persistent://public/default/t", -1)
    return batch.to_pylist()


def test_rows_are_identical_whatever_the_format() -> None:
    pulsar = _rows(_pulsar())
    assert [r["value"] for r in pulsar] == [b"v0", b"v1", b""]
    assert [r["sequence_id"] for r in pulsar] == [10, 11, 12]
    assert _rows(_kafka()) == pulsar
    assert _rows(_arrow()) == pulsar


def test_int_range_is_the_range_of_its_type() -> None:
    """Batch indexes and sequence ids are built in C rather than from Python ranges."""
    assert int_range(0, 4, pa.int32()).equals(pa.array(range(4), pa.int32()))
    assert int_range(2**40, 3, pa.int64()).equals(pa.array(range(2**40, 2**40 + 3), pa.int64()))
    assert int_range(-2, 3, pa.int64()).to_pylist() == [-2, -1, 0]
    assert len(int_range(7, 0, pa.int64())) == 0


def _arrow_ipc(batch: pa.RecordBatch) -> bytes:
    """An Arrow entry as a foreign writer may send it: the IPC stream of `batch` as it is."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return build_entry(_metadata("arrow"), sink.getvalue().to_pybytes())


def test_an_unset_event_time_reads_as_null_however_an_arrow_entry_says_it() -> None:
    """Pulsar's unset event time is 0 (what the client's getEventTime() gives): a 0, a null or
    no column at all in an Arrow entry is the same message, so the same row (null)."""
    singles = [(pb.SingleMessageMetadata(), b"a"), (pb.SingleMessageMetadata(event_time=7), b"b"),
               (pb.SingleMessageMetadata(), b"c")]
    pulsar = _rows(build_entry(_metadata(None), encode_batch(singles)))
    assert [r["event_time"] for r in pulsar] == [None, 7, None]
    values = pa.array([b"a", b"b", b"c"], pa.binary())
    for times in ([0, 7, None], [None, 7, 0]):
        batch = pa.record_batch([values, pa.array(times, pa.int64())], names=["value", "event_time"])
        assert _rows(_arrow_ipc(batch)) == pulsar
    no_times = [(pb.SingleMessageMetadata(), value) for value in (b"a", b"b", b"c")]
    unset = _rows(build_entry(_metadata(None), encode_batch(no_times)))
    assert _rows(_arrow_ipc(pa.record_batch([values], names=["value"]))) == unset


def test_an_arrow_entry_in_other_types_and_column_order_gives_the_same_rows() -> None:
    """Entries from other writers need not be in the canonical layout: they are read through it."""
    batch = pa.record_batch([
        pa.array([m[3] for m in MESSAGES], pa.timestamp("ms", tz="UTC")),
        pa.array([list(m[2].items()) for m in MESSAGES], pa.map_(pa.string(), pa.string())),
        pa.array([m[0] for m in MESSAGES], pa.large_string()),
        pa.array([m[1] for m in MESSAGES], pa.large_binary()),
    ], names=["event_time", "properties", "key", "value"])
    assert _rows(_arrow_ipc(batch)) == _rows(_pulsar())


def _versioned_entry(version: int | None, size: int | None) -> bytes:
    """A batch of `size` messages (None: one message, not batched) stamped with `version`."""
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=5)
    if version is not None:
        metadata.schema_version = version.to_bytes(8, "big")
    if size is None:
        return build_entry(metadata, b"v")
    metadata.num_messages_in_batch = size
    return build_entry(metadata, encode_batch([(pb.SingleMessageMetadata(), b"v%d" % i) for i in range(size)]))


def test_entry_columns_on_request_follow_each_row() -> None:
    """schema_version and batch_size come from the entry's metadata, parsed once with the rest;
    they hold per row when only some of a batch's messages are kept."""
    builder = TableBuilder("persistent://public/default/t", -1, extra_columns=(SCHEMA_VERSION, BATCH_SIZE))
    specs = [(3, 4, None), (None, 5, [1, 3]), (7, None, None), (2**40, 1, None)]
    for entry_id, (version, size, keep) in enumerate(specs):
        builder.add(1, entry_id, _versioned_entry(version, size), keep)
    batch = builder.flush()
    assert batch is not None
    assert batch.schema.names[-2:] == [SCHEMA_VERSION, BATCH_SIZE]
    assert batch.column(SCHEMA_VERSION).to_pylist() == [3] * 4 + [-1] * 2 + [7] + [2**40]
    assert batch.column(BATCH_SIZE).to_pylist() == [4] * 4 + [5] * 2 + [0] + [1]
    assert batch.column("batch_index").to_pylist() == [0, 1, 2, 3, 1, 3, -1, 0]
    plain = TableBuilder("persistent://public/default/t", -1)
    plain.add(1, 0, _versioned_entry(3, 2))
    assert plain.flush().schema == ARROW_SCHEMA  # nothing added unless asked


def test_markers_are_never_rows() -> None:
    """A replicated subscription's or a transaction's marker between two messages: two rows."""
    from magnetar.wire import markers  # noqa: PLC0415
    from magnetar.wire.txn import TXN_COMMIT_MARKER, TxnId, marker_entry  # noqa: PLC0415

    builder = TableBuilder("persistent://public/default/t", -1)
    entries = [build_entry(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"a"),
               markers.update_entry("sub", {"west": (1, 2)}),
               marker_entry(TXN_COMMIT_MARKER, TxnId(1, 1)),
               build_entry(pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2), b"b")]
    assert [builder.add(1, i, entry) for i, entry in enumerate(entries)] == [1, 0, 0, 1]
    assert builder.flush().column("value").to_pylist() == [b"a", b"b"]

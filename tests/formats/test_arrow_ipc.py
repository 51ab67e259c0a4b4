"""Arrow IPC entries: one record batch per entry, read as messages or as columns."""

from __future__ import annotations

import pyarrow as pa
import pytest

from magnetar.formats import CorruptPayloadError, EntryPayload, resolve_processors
from magnetar.formats.arrow_ipc import encode_arrow_batches
from magnetar.wire.entry import FORMAT_PROPERTY
from magnetar.wire.proto import pulsar_api_pb2 as pb

TABLE = pa.table({
    "value": pa.array([b"a", b"bb", None], pa.binary()),
    "key": pa.array(["k0", None, "k2"]),
    "properties": pa.array([[("p", "1")], [], None], pa.map_(pa.string(), pa.string())),
    "event_time": pa.array([10, None, 30], pa.int64()),
})


def _entry(payload: bytes, count: int) -> EntryPayload:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1, num_messages_in_batch=count)
    metadata.properties.add(key=FORMAT_PROPERTY, value="arrow")
    return EntryPayload(None, metadata, memoryview(payload), "arrow")


def test_one_payload_per_record_batch() -> None:
    payloads = encode_arrow_batches(TABLE, max_rows=2)
    assert [rows for _, rows in payloads] == [2, 1]


def test_rows_become_messages() -> None:
    ((payload, rows),) = encode_arrow_batches(TABLE)
    messages = resolve_processors("arrow").messages(_entry(payload, rows))
    assert [bytes(m.value) for m in messages] == [b"a", b"bb", b""]
    assert [m.index for m in messages] == [0, 1, 2]
    first, second, third = (m.metadata for m in messages)
    assert first.partition_key == "k0" and first.event_time == 10
    assert {kv.key: kv.value for kv in first.properties} == {"p": "1"}
    assert not second.HasField("partition_key") and not second.properties
    assert third.null_value and third.event_time == 30


def test_timestamps_finer_than_milliseconds_are_truncated_not_refused() -> None:
    """Spark's timestamps are microseconds with a time zone; Pulsar's event time is milliseconds."""
    micros = pa.array([1_500, 1_700_000_000_123_456], pa.timestamp("us", tz="UTC"))
    ((payload, rows),) = encode_arrow_batches(pa.table({"value": pa.array([b"x", b"y"]), "event_time": micros}))
    messages = resolve_processors("arrow").messages(_entry(payload, rows))
    assert [m.metadata.event_time for m in messages] == [1, 1_700_000_000_123]


def test_columns_come_without_a_message_each() -> None:
    ((payload, rows),) = encode_arrow_batches(TABLE)
    columns = resolve_processors("arrow").columns(_entry(payload, rows))
    assert columns.value.to_pylist() == [b"a", b"bb", b""]
    assert columns.sequence_id.to_pylist() == [7, 8, 9]
    assert columns.batch_index.to_pylist() == [0, 1, 2]
    assert columns.properties.to_pylist() == [[("p", "1")], [], []]


def test_a_value_column_is_required_and_strings_are_cast() -> None:
    with pytest.raises(ValueError, match="needs a 'value' column"):
        encode_arrow_batches(pa.table({"key": ["k"]}))
    ((payload, _),) = encode_arrow_batches(pa.table({"value": ["text"]}))
    assert bytes(resolve_processors("arrow").messages(_entry(payload, 1))[0].value) == b"text"


def test_garbage_and_a_wrong_row_count_are_clear_errors() -> None:
    processors = resolve_processors("arrow")
    with pytest.raises(CorruptPayloadError, match="corrupt arrow payload"):
        processors.messages(_entry(b"\xff\xff\xff\xff garbage", 3))
    ((payload, rows),) = encode_arrow_batches(TABLE)
    with pytest.raises(CorruptPayloadError, match="3 rows, MessageMetadata says num_messages_in_batch=4"):
        processors.columns(_entry(payload, rows + 1))
    with pytest.raises(CorruptPayloadError, match="corrupt arrow payload"):
        processors.messages(_entry(payload[: len(payload) // 2], rows))

"""Kafka record batches: batches built by kafka-python (a real Kafka library) read as messages."""

from __future__ import annotations

import struct

import cramjam
import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from magnetar.formats import CorruptPayloadError, EntryPayload, resolve_processors
from magnetar.formats.kafka_compression import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from magnetar.formats.kafka_records import (
    compaction_records,
    decode_record_batch,
    encode_record_batch,
    retain_records,
)
from magnetar.wire.entry import FORMAT_PROPERTY
from magnetar.wire.proto import pulsar_api_pb2 as pb

RECORDS = [
    (None, b"first", [], 1_700_000_000_000),
    (b"key-1", b"second", [("h1", b"one"), ("h2", b"two")], 1_700_000_000_005),
    (b"key-2", None, [("h", None)], 1_700_000_000_009),  # a tombstone
    (b"\xff\xfe", b"", [], 1_700_000_000_010),  # a key that is not UTF-8
]


def _kafka_python(codec: int, records=RECORDS) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, (key, value, headers, timestamp) in enumerate(records):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


def _messages(payload: bytes, count: int | None = None):
    metadata = pb.MessageMetadata(producer_name="kop", sequence_id=0, publish_time=1,
                                  num_messages_in_batch=count if count is not None else len(RECORDS))
    metadata.properties.add(key=FORMAT_PROPERTY, value="kafka")
    entry = EntryPayload(None, metadata, memoryview(payload), "kafka")
    return resolve_processors("kafka").messages(entry)


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_LZ4, CODEC_ZSTD])
def test_kafka_python_batches_become_messages(codec) -> None:
    messages = _messages(_kafka_python(codec))
    assert [m.index for m in messages] == [0, 1, 2, 3]
    assert [bytes(m.value) for m in messages] == [b"first", b"second", b"", b""]
    first, second, tombstone, binary = (m.metadata for m in messages)
    assert not first.HasField("partition_key") and first.event_time == 1_700_000_000_000
    assert second.partition_key == "key-1" and second.event_time == 1_700_000_000_005
    assert {kv.key: kv.value for kv in second.properties} == {"h1": "one", "h2": "two"}
    assert tombstone.null_value and not second.null_value and not binary.null_value
    assert binary.partition_key_b64_encoded and binary.partition_key == "//4="


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_our_encoder_round_trips_and_matches_kafka_python(codec) -> None:
    ours = encode_record_batch(RECORDS, codec)
    header, records = decode_record_batch(ours)
    assert header.count == len(RECORDS)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (k, v, list(h), t) for k, v, h, t in RECORDS]
    if codec in (CODEC_NONE,):  # uncompressed bytes are deterministic: the same as Kafka's own
        assert ours == _kafka_python(codec)


def test_xerial_framed_snappy_as_the_java_client_writes_it() -> None:
    plain = encode_record_batch(RECORDS, CODEC_NONE)
    records = plain[61:]
    block = bytes(cramjam.snappy.compress_raw(records))
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    body = struct.pack(">h", CODEC_SNAPPY) + plain[23:61] + framed
    header = struct.pack(">qiibI", 0, 9 + len(body), 0, 2, crc32c.crc32c(body))
    assert [r.value for r in decode_record_batch(header + body)[1]] == [b"first", b"second", None, b""]


def test_a_flipped_byte_fails_the_crc_with_a_clear_error() -> None:
    data = bytearray(_kafka_python(CODEC_NONE))
    data[-3] ^= 0xFF
    with pytest.raises(CorruptPayloadError, match="corrupt kafka payload: CRC32C mismatch"):
        _messages(bytes(data))


@pytest.mark.parametrize("payload, reason", [
    (b"garbage", "cannot hold a record batch header"),
    (b"\x00" * 61, "magic 0"),
])
def test_garbage_is_refused_by_name(payload, reason) -> None:
    with pytest.raises(CorruptPayloadError, match=reason):
        _messages(payload)


def test_a_count_that_disagrees_with_the_metadata_is_refused() -> None:
    with pytest.raises(CorruptPayloadError, match="4 records, MessageMetadata says num_messages_in_batch=3"):
        _messages(_kafka_python(CODEC_NONE), count=3)


def test_truncated_records_behind_a_valid_crc_are_refused() -> None:
    # A batch whose CRC is right but whose record lengths lie: the reader must stop at the bytes' end.
    plain = bytearray(encode_record_batch(RECORDS, CODEC_NONE))
    plain[61] = 0x7E  # first record claims 63 bytes
    struct.pack_into(">I", plain, 17, crc32c.crc32c(bytes(plain[21:])))
    with pytest.raises(CorruptPayloadError, match="corrupt kafka payload"):
        _messages(bytes(plain))


@settings(max_examples=300)
@given(st.data())
def test_damaged_records_behind_a_valid_crc_decode_or_fail_clearly(data) -> None:
    """Records are parsed by hand: whatever bytes a writer (or a bug) puts behind a correct CRC,
    the result is records or a CorruptPayloadError, never another exception."""
    batch = bytearray(_kafka_python(CODEC_NONE))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(61, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del batch[data.draw(st.integers(61, len(batch) - 1)):]
        struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    try:
        _header, records = decode_record_batch(bytes(batch))
    except CorruptPayloadError:
        return
    assert len(records) == len(RECORDS)


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_LZ4, CODEC_ZSTD])
def test_a_compacted_batch_keeps_its_survivors_at_their_places(codec) -> None:
    """retain_records (compaction of a Kafka-format entry) keeps each kept record's bytes, the
    batch's offsets and producer fields; a reader numbers the survivors by their places."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=7,
                                        producer_epoch=2, base_sequence=40, batch_size=1 << 20)
    for offset, (key, value, headers, timestamp) in enumerate(RECORDS):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    original = bytes(builder.build())
    kept = retain_records(original, [1, 3])
    header, records = decode_record_batch(kept, check_crc=True)
    before, _ = decode_record_batch(original)
    assert (header.count, header.last_offset_delta, header.base_timestamp, header.max_timestamp) == (
        2, 3, before.base_timestamp, before.max_timestamp)
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.attributes) == (
        7, 2, 40, before.attributes)
    assert [(r.offset_delta, r.key, r.value, r.timestamp) for r in records] == [
        (1, b"key-1", b"second", 1_700_000_000_005), (3, b"\xff\xfe", b"", 1_700_000_000_010)]
    assert [m.index for m in _messages(kept)] == [1, 3]  # numbered by place: the entry says 4 messages
    assert retain_records(original, [9]) is None
    assert compaction_records(original) == [(0, None, False), (1, "key-1", False), (2, "key-2", True),
                                            (3, "//4=", False)]


def test_a_compacted_batch_naming_places_past_the_entry_is_refused() -> None:
    with pytest.raises(CorruptPayloadError, match="2 records, MessageMetadata says num_messages_in_batch=3"):
        _messages(retain_records(_kafka_python(CODEC_NONE), [0, 3]), count=3)

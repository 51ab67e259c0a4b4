"""pulsar_batch_message_steps writes a Kafka batch's records as Pulsar batch messages directly:
the bytes must be exactly those of the object path (a record reader, a SingleMessageMetadata
per record, protobuf's serializer), and a damaged batch must fail with the same error."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from magnetar.formats import CorruptPayloadError
from magnetar.formats.kafka_compression import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_ZSTD
from magnetar.formats.kafka_records import (
    HEADER_SIZE,
    all_steps,
    decode_record_batch,
    pulsar_batch_message_steps,
    single_message_metadata,
)

_U32 = struct.Struct(">I")
_LOG_APPEND_TIME = 0x08


def _object_path(data: bytes) -> tuple[int, bytes]:
    """What the broker stored before: every record decoded, its metadata built and serialized."""
    _, records = decode_record_batch(data, check_crc=False)
    parts = []
    for record in records:
        single = single_message_metadata(record).SerializeToString()
        parts += (_U32.pack(len(single)), single, record.value or b"")
    return len(records), b"".join(parts)


def _outcome(convert, data: bytes) -> tuple:
    try:
        return ("ok", *convert(data))
    except CorruptPayloadError as exc:
        return ("corrupt", str(exc))


def _direct(data: bytes) -> tuple[int, bytes]:
    _, count, messages = all_steps(pulsar_batch_message_steps(data))
    return count, messages


def _batch(records, codec: int = CODEC_NONE, log_append: bool = False) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 22)
    for offset, (key, value, headers, timestamp) in enumerate(records):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    data = bytearray(builder.build())
    if log_append:  # the attribute only: the CRC is not what these paths check
        data[22] |= _LOG_APPEND_TIME
    return bytes(data)


_keys = st.one_of(st.none(), st.binary(max_size=12), st.text(max_size=12).map(str.encode))
_records = st.lists(st.tuples(
    _keys,
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.just([]), st.lists(st.tuples(st.text(min_size=1, max_size=6), st.one_of(
        st.none(), st.binary(max_size=8))), max_size=2)),
    st.one_of(st.integers(min_value=0, max_value=2**45), st.sampled_from([-1, 0, 1_700_000_000_000]))),
    min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(_records, st.sampled_from([CODEC_NONE, CODEC_GZIP, CODEC_LZ4, CODEC_ZSTD]), st.booleans(), st.booleans())
def test_the_direct_conversion_writes_the_object_paths_bytes(records, codec, log_append, headers) -> None:
    """Half the batches without headers: those take the direct path for every record."""
    if not headers:
        records = [(key, value, [], timestamp) for key, value, _, timestamp in records]
    data = _batch(records, codec, log_append)
    assert _outcome(_direct, data) == _outcome(_object_path, data)


def test_keyless_records_sharing_a_size_and_time_each_get_their_own_value() -> None:
    """The size-and-time prefix is shared; the values never are."""
    records = [(None, b"%05d" % n, [], 1_700_000_000_000) for n in range(50)]
    data = _batch(records)
    assert _direct(data) == _object_path(data)
    assert _direct(data)[1].count(b"\x18\x05\x28") == 50


def test_damaged_records_fail_as_the_record_reader_says() -> None:
    rng = random.Random(45)
    records = [(rng.choice([None, b"k", b"\xff"]), rng.choice([None, b"value", b""]),
                rng.choice([[], [("h", b"1")]]), 1_700_000_000_000 + n) for n in range(12)]
    data = _batch(records)
    seen = set()
    for _ in range(300):
        broken = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            broken[rng.randrange(HEADER_SIZE, len(data))] = rng.randrange(256)
        direct, reference = _outcome(_direct, bytes(broken)), _outcome(_object_path, bytes(broken))
        assert direct == reference
        seen.add(direct[0])
    assert seen == {"ok", "corrupt"}, "both outcomes were exercised"


@pytest.mark.parametrize("cut", [1, 5, 40])
def test_truncated_records_fail_as_the_record_reader_says(cut) -> None:
    data = _batch([(b"key", b"v" * 30, [], 5)] * 3)[:-cut]
    assert _outcome(_direct, data)[0] == "corrupt"
    assert _outcome(_direct, data) == _outcome(_object_path, data)


def test_records_past_the_count_fail_as_the_record_reader_says() -> None:
    """A record count lowered under the CRC's cover (the count is not what the CRC check
    here is about): the bytes left over are an error, not dropped."""
    data = bytearray(_batch([(None, b"v", [], 5)] * 3))
    struct.pack_into(">i", data, HEADER_SIZE - 4, 2)
    assert _outcome(_direct, bytes(data))[0] == "corrupt"
    assert _outcome(_direct, bytes(data)) == _outcome(_object_path, bytes(data))


def test_a_header_count_with_no_headers_after_it_fails_as_the_record_reader_says() -> None:
    data = bytearray(_batch([(None, b"v", [], 5), (None, b"w", [], 5)]))
    assert data[-1] == 0  # the last record's header count
    data[-1] = 2  # one header (zigzag), and nothing of it
    assert _outcome(_direct, bytes(data))[0] == "corrupt"
    assert _outcome(_direct, bytes(data)) == _outcome(_object_path, bytes(data))

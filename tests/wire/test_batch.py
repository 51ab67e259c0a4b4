from __future__ import annotations

import contextlib
import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.wire.batch import BatchMessage, decode_batch, decode_messages, encode_batch
from magnetar.wire.compression import compress
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

MAX = 5 << 20


def single(**fields: object) -> pb.SingleMessageMetadata:
    return pb.SingleMessageMetadata(**fields)


MESSAGES = [
    (single(partition_key="k0", sequence_id=0, properties=[pb.KeyValue(key="a", value="1")]), b"zero"),
    (single(ordering_key=b"o", event_time=5, sequence_id=1), b""),
    (single(null_value=True, sequence_id=2), b"two!"),
]
BATCH = encode_batch(MESSAGES)


def frame(smm: bytes, value: bytes = b"") -> bytes:
    return struct.pack(">I", len(smm)) + smm + value


def test_layout_is_size_metadata_value_per_message() -> None:
    first = single(payload_size=3).SerializeToString()
    assert encode_batch([(pb.SingleMessageMetadata(), b"abc")]) == frame(first, b"abc")


def test_round_trip_keeps_order_fields_and_values() -> None:
    decoded = decode_batch(BATCH, 3)
    assert [m.index for m in decoded] == [0, 1, 2]
    assert [bytes(m.value) for m in decoded] == [v for _, v in MESSAGES]
    for (sent, value), got in zip(MESSAGES, decoded, strict=True):
        expected = pb.SingleMessageMetadata()
        expected.CopyFrom(sent)
        expected.payload_size = len(value)
        assert got.metadata == expected


def test_encode_sets_payload_size_without_touching_the_callers_metadata() -> None:
    wrong = single(payload_size=999)
    encoded = encode_batch([(wrong, b"xy")])
    assert decode_batch(encoded, 1)[0].metadata.payload_size == 2
    assert wrong.payload_size == 999


def test_large_values_are_views_not_copies() -> None:
    big = b"v" * 5000
    payload = bytearray(encode_batch([(pb.SingleMessageMetadata(payload_size=len(big)), big)] * 2))
    value = decode_batch(payload, 2)[0].value
    payload[payload.index(b"v")] = ord("V")
    assert bytes(value) == b"V" + big[1:]


def test_small_values_are_bytes_equal_to_their_slice() -> None:
    values = [message.value for message in decode_batch(memoryview(BATCH), 3)]
    assert all(type(value) is bytes for value in values)
    assert [message.value for message in decode_batch(BATCH, 3)] == values


@pytest.mark.parametrize(
    ("payload", "count", "message"),
    [
        (BATCH, 2, "after the last"),
        (BATCH, 4, "ends before message 3"),
        (BATCH + b"\x00", 3, "after the last"),
        (BATCH[:-1], 3, "claims"),
        (BATCH, -1, "cannot hold"),
        (BATCH, 10**9, "cannot hold"),
        (b"", 1, "cannot hold"),
        (struct.pack(">I", 0xFFFF_FFFF) + bytes(8), 1, "runs past"),
        (frame(b"\x08\x96"), 1, "garbage"),
        (frame(single(sequence_id=1).SerializePartialToString()) + bytes(4), 1, "no payload_size"),
        (frame(single(payload_size=-1).SerializeToString()) + bytes(4), 1, "claims -1"),
        (frame(single(payload_size=2**31 - 1).SerializeToString()) + bytes(4), 1, "claims"),
    ],
    ids=[
        "count-too-small",
        "count-too-big",
        "trailing-byte",
        "truncated-value",
        "negative-count",
        "absurd-count",
        "empty-payload",
        "metadata-size-4gb",
        "garbage-protobuf",
        "missing-payload-size",
        "negative-payload-size",
        "payload-size-2gb",
    ],
)
def test_counts_and_sizes_must_agree_with_the_bytes(payload: bytes, count: int, message: str) -> None:
    with pytest.raises(WireError, match=message):
        decode_batch(payload, count)


def test_empty_batch() -> None:
    assert decode_batch(b"", 0) == []


def test_size_field_claiming_4gb_allocates_nothing() -> None:
    tracemalloc.start()
    with pytest.raises(WireError):
        decode_batch(struct.pack(">I", 0xFFFF_FFFF) + bytes(1000), 100)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 1024


def metadata(**fields: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1, **fields)


@pytest.mark.parametrize("codec", [pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY], ids=pb.CompressionType.Name)
def test_decode_messages_decompresses_and_unpacks_a_batch(codec: int) -> None:
    md = metadata(num_messages_in_batch=3, compression=codec, uncompressed_size=len(BATCH))
    decoded = decode_messages(md, compress(codec, BATCH), max_size=MAX)
    assert [(m.index, bytes(m.value)) for m in decoded] == [(i, v) for i, (_, v) in enumerate(MESSAGES)]


def test_presence_of_num_messages_in_batch_makes_a_batch_even_of_one() -> None:
    one = encode_batch([(single(), b"v")])
    assert decode_messages(metadata(num_messages_in_batch=1), one, max_size=MAX)[0].index == 0
    # Absent field (proto default 1): the whole payload is the value of one message.
    [whole] = decode_messages(metadata(), one, max_size=MAX)
    assert (whole.index, bytes(whole.value)) == (-1, one)


def test_single_message_gets_its_per_message_fields_from_message_metadata() -> None:
    md = metadata(
        properties=[pb.KeyValue(key="a", value="1")],
        partition_key="pk",
        ordering_key=b"ok",
        event_time=42,
        null_value=True,
        replicate_to=["c1"],
    )
    [only] = decode_messages(md, b"value", max_size=MAX)
    assert only == BatchMessage(
        single(
            properties=[pb.KeyValue(key="a", value="1")],
            partition_key="pk",
            ordering_key=b"ok",
            event_time=42,
            sequence_id=7,
            null_value=True,
            payload_size=5,
        ),
        only.value,
        -1,
    )
    assert bytes(only.value) == b"value"


def test_compression_is_by_presence_and_none_is_left_alone() -> None:
    md = metadata(compression=pb.NONE, uncompressed_size=999)
    assert bytes(decode_messages(md, b"raw", max_size=MAX)[0].value) == b"raw"
    # LZ4 without uncompressed_size means size 0: the C++ consumer fails it, and so do we.
    with pytest.raises(WireError):
        decode_messages(metadata(compression=pb.LZ4), compress(pb.LZ4, b"raw"), max_size=MAX)


def test_decode_messages_enforces_max_size() -> None:
    md = metadata(num_messages_in_batch=3, compression=pb.LZ4, uncompressed_size=len(BATCH))
    with pytest.raises(WireError, match="outside"):
        decode_messages(md, compress(pb.LZ4, BATCH), max_size=len(BATCH) - 1)


smms = st.builds(
    pb.SingleMessageMetadata,
    properties=st.lists(st.builds(pb.KeyValue, key=st.text(max_size=8), value=st.text(max_size=8)), max_size=3),
    partition_key=st.text(max_size=10),
    ordering_key=st.binary(max_size=10),
    event_time=st.integers(0, 2**64 - 1),
    sequence_id=st.integers(0, 2**64 - 1),
    null_value=st.booleans(),
)


@given(st.lists(st.tuples(smms, st.binary(max_size=300)), max_size=40))
def test_batch_round_trip_property(messages: list[tuple[pb.SingleMessageMetadata, bytes]]) -> None:
    decoded = decode_batch(encode_batch(messages), len(messages))
    assert [bytes(m.value) for m in decoded] == [v for _, v in messages]
    for (sent, _), got in zip(messages, decoded, strict=True):
        got.metadata.ClearField("payload_size")
        assert got.metadata == sent


@settings(max_examples=500)
@given(garbage=st.binary(max_size=600), count=st.integers(-3, 120))
def test_garbage_batches_raise_only_wire_error(garbage: bytes, count: int) -> None:
    try:
        decoded = decode_batch(garbage, count)
    except WireError:
        return
    assert len(decoded) == count


@settings(max_examples=300)
@given(
    garbage=st.binary(max_size=300),
    codec=st.sampled_from([None, pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]),
    size=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    count=st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
)
def test_garbage_entries_raise_only_wire_error(
    garbage: bytes, codec: int | None, size: int | None, count: int | None
) -> None:
    md = metadata()
    if codec is not None:
        md.compression = codec
    if size is not None:
        md.uncompressed_size = size
    if count is not None:
        md.num_messages_in_batch = count
    with contextlib.suppress(WireError):
        decode_messages(md, garbage, max_size=1 << 16)

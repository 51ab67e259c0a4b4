"""The columnar batch reading: guessed offsets and bulk metadata parsing agree with decode_batch,
and the Spark rows built from them equal the rows built message by message."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from optional import optional_module

from magnetar.wire.batch import batch_header_offsets, decode_batch, encode_batch, metadata_columns
from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb


def _true_offsets(payload: bytes, count: int) -> list[int]:
    offsets, offset = [], 0
    for message in decode_batch(payload, count):
        offsets.append(offset)
        offset += 4 + len(message.metadata.SerializeToString()) + len(message.value)
    return offsets


@given(st.lists(st.tuples(st.integers(0, 2**40), st.binary(max_size=300)), min_size=1, max_size=40))
def test_offsets_of_common_batches_are_the_real_ones(messages) -> None:
    payload = encode_batch([(pb.SingleMessageMetadata(sequence_id=s, event_time=s), v) for s, v in messages])
    assert batch_header_offsets(payload, len(messages)) == _true_offsets(payload, len(messages))


def test_two_byte_payload_sizes_are_followed() -> None:
    sizes = [0, 127, 128, 16383]
    payload = encode_batch([(pb.SingleMessageMetadata(), bytes(n)) for n in sizes])
    assert batch_header_offsets(payload, len(sizes)) == _true_offsets(payload, len(sizes))


@pytest.mark.parametrize("count", [0, -1, 2, 10**9])
def test_offsets_refuse_what_cannot_be_the_batch(count) -> None:
    payload = encode_batch([(pb.SingleMessageMetadata(), b"abc")] * 3)
    assert batch_header_offsets(payload, count) is None
    assert batch_header_offsets(payload[:-1], 3) is None


def _metadata(smms: list[bytes]) -> tuple[bytes, bytes]:
    """(concatenated, framed) as `metadata_columns` takes them; each SMM under 128 bytes."""
    return b"".join(smms), b"".join(b"\x0a" + bytes([len(s)]) + s for s in smms)


def test_columns_of_canonical_metadata() -> None:
    smms = [pb.SingleMessageMetadata(payload_size=i, sequence_id=10 + i).SerializeToString() for i in range(3)]
    parsed = metadata_columns(*_metadata(smms), 3)
    assert parsed is not None and parsed.canonical
    assert list(parsed.columns.sequence_id) == [10, 11, 12]
    assert [m.payload_size for m in parsed.messages.messages] == [0, 1, 2]


def test_a_repeated_field_makes_columns_untrusted() -> None:
    """Message 0 has sequence_id twice, message 1 none: the column would pair 2 with message 1."""
    first = pb.SingleMessageMetadata(payload_size=0, sequence_id=1).SerializeToString() + b"\x40\x02"
    second = pb.SingleMessageMetadata(payload_size=0).SerializeToString()
    parsed = metadata_columns(*_metadata([first, second]), 2)
    assert parsed is not None and not parsed.canonical
    assert [m.sequence_id for m in parsed.messages.messages] == [2, 0]


def test_garbage_or_a_wrong_count_is_refused() -> None:
    smm = pb.SingleMessageMetadata(payload_size=0).SerializeToString()
    assert metadata_columns(*_metadata([smm]), 2) is None
    assert metadata_columns(b"\x08\x96", b"\x0a\x02\x08\x96", 1) is None


# --- Spark rows: the columnar path must give exactly the rows of the message-by-message path.

_key = st.one_of(st.none(), st.text(max_size=5))
_props = st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)
_message = st.fixed_dictionaries(
    {
        "value": st.binary(max_size=200),
        "key": _key,
        "props": _props,
        "event_time": st.one_of(st.none(), st.integers(0, 2**50)),
        "sequence_id": st.one_of(st.none(), st.integers(0, 2**40)),
    }
)


def _single_metadata(spec: dict) -> pb.SingleMessageMetadata:
    smm = pb.SingleMessageMetadata(properties=[pb.KeyValue(key=k, value=v) for k, v in spec["props"].items()])
    for name in ("event_time", "sequence_id"):
        if spec[name] is not None:
            setattr(smm, name, spec[name])
    if spec["key"] is not None:
        smm.partition_key = spec["key"]
    return smm


def _rows(entries: list[bytes], columnar: bool) -> object:
    optional_module("pyarrow")
    from magnetar.formats import pulsar_batch  # noqa: PLC0415 (needs pyarrow)
    from magnetar.spark import rows  # noqa: PLC0415

    with pytest.MonkeyPatch.context() as patch:
        if not columnar:
            patch.setattr(pulsar_batch, "columns_of_batch", lambda *_: None)
        builder = rows.RowBuilder("persistent://public/default/t", 0)
        for n, entry in enumerate(entries):
            builder.add(3, n, entry)
        return builder.flush()


_plain = st.builds(lambda m: m | {"key": None, "props": {}}, _message)
_batch = st.one_of(st.lists(_message, min_size=1, max_size=12), st.lists(_plain, min_size=1, max_size=12))


@settings(max_examples=80)
@given(st.lists(_batch, min_size=1, max_size=4), st.booleans())
def test_columnar_rows_equal_message_by_message_rows(batches, repeat_a_field) -> None:
    entries = []
    for n, batch in enumerate(batches):
        payload = encode_batch([(_single_metadata(m), m["value"]) for m in batch])
        if repeat_a_field and n == 0:  # a second sequence_id in message 0's metadata (upb keeps the last)
            (size,) = struct.unpack_from(">I", payload)
            payload = struct.pack(">I", size + 2) + payload[4 : 4 + size] + b"\x40\x07" + payload[4 + size :]
        metadata = pb.MessageMetadata(
            producer_name="p", sequence_id=100 * n, publish_time=n, num_messages_in_batch=len(batch)
        )
        entries.append(build_entry(metadata, payload))
    columnar = _rows(entries, True)
    one_by_one = _rows(entries, False)
    assert columnar.equals(one_by_one), (columnar.to_pylist(), one_by_one.to_pylist())


def test_the_common_batch_takes_the_columnar_path(monkeypatch) -> None:
    optional_module("pyarrow")
    from magnetar.formats import payload as payload_api  # noqa: PLC0415 (needs pyarrow)
    from magnetar.formats import pulsar_batch  # noqa: PLC0415

    smms = [pb.SingleMessageMetadata(sequence_id=i, partition_key="k" * (i % 2)) for i in range(50)]
    payload = encode_batch([(smm, b"v" * 300) for smm in smms])
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=50)
    monkeypatch.setattr(payload_api, "decode_batch", None)  # calling it would fail
    assert pulsar_batch.columns_of_batch(metadata, payload, 50) is not None


def test_rows_of_a_batch_repeating_a_field_pair_values_with_their_message() -> None:
    first = pb.SingleMessageMetadata(payload_size=1, sequence_id=1).SerializeToString() + b"\x40\x02"
    second = pb.SingleMessageMetadata(payload_size=1).SerializeToString()
    payload = b"".join(struct.pack(">I", len(smm)) + smm + b"v" for smm in (first, second))
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=50, publish_time=1, num_messages_in_batch=2)
    entry = build_entry(metadata, payload)
    rows = _rows([entry], True)
    assert rows.equals(_rows([entry], False))
    assert rows.column("sequence_id").to_pylist() == [2, 51]


def test_a_negative_payload_size_is_no_offset() -> None:
    smm = b"\x12\x01k" + pb.SingleMessageMetadata(payload_size=-5).SerializeToString()
    payload = struct.pack(">I", len(smm)) + smm + bytes(20)
    assert batch_header_offsets(payload, 1) is None


def test_record_batches_are_bounded_by_bytes_too(monkeypatch) -> None:
    optional_module("pyarrow")
    from magnetar.spark import rows  # noqa: PLC0415 (needs pyarrow)

    payload = encode_batch([(pb.SingleMessageMetadata(sequence_id=i), bytes(1000)) for i in range(10)])
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=10)
    entries = [(1, n, build_entry(metadata, payload)) for n in range(7)]
    monkeypatch.setattr(rows, "MAX_BATCH_BYTES", 2 * len(entries[0][2]))
    batches = list(rows.rows_of_entries(entries, "persistent://public/default/t", 0))
    assert [b.num_rows for b in batches] == [20, 20, 20, 10]
    assert [i for b in batches for i in b.column("entry_id").to_pylist()] == [n for n in range(7) for _ in range(10)]

from __future__ import annotations

import contextlib

import pulsar
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.wire.errors import WireError
from magnetar.wire.message_id import (
    EARLIEST,
    INT64_MAX,
    LATEST,
    MessageId,
    ack_set_bits,
    ack_set_from_indexes,
    ack_set_of_bits,
    set_bits,
    unacked_indexes,
)
from magnetar.wire.proto import pulsar_api_pb2 as pb

int64s = st.integers(-(2**63), 2**63 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
ids = st.builds(MessageId, int64s, int64s, int32s, int32s, int32s)


def test_serialize_matches_the_trace() -> None:
    assert MessageId(7, 0).serialize() == bytes.fromhex("08071000")


def test_special_ids() -> None:
    assert MessageId(-1, -1) == EARLIEST
    assert MessageId(INT64_MAX, INT64_MAX) == LATEST
    assert EARLIEST.serialize() == pulsar.MessageId.earliest.serialize()
    assert LATEST.serialize() == pulsar.MessageId.latest.serialize()


def test_minus_one_travels_as_unsigned() -> None:
    data = EARLIEST.to_proto()
    assert data.ledgerId == data.entryId == 2**64 - 1
    assert MessageId.from_proto(data) == EARLIEST


def test_only_non_default_optionals_are_written() -> None:
    assert not MessageId(1, 2).to_proto().ListFields()[2:]
    data = MessageId(1, 2, partition=0, batch_index=0, batch_size=5).to_proto()
    assert (data.HasField("partition"), data.HasField("batch_index"), data.batch_size) == (True, True, 5)


def test_absent_optionals_read_as_cpp_defaults() -> None:
    assert MessageId.from_proto(pb.MessageIdData(ledgerId=3, entryId=4)) == MessageId(3, 4, -1, -1, 0)


def test_ordering_follows_cpp_whole_entry_before_its_batch_messages() -> None:
    ordered = [
        EARLIEST,
        MessageId(7, 0),
        MessageId(7, 0, batch_index=0),
        MessageId(7, 0, batch_index=1),
        MessageId(7, 1),
        LATEST,
    ]
    assert sorted(reversed(ordered)) == ordered
    # Partition is not part of the order, but is part of identity.
    assert not MessageId(7, 0, partition=1) < MessageId(7, 0, partition=0)
    assert MessageId(7, 0, partition=1) != MessageId(7, 0, partition=0)


@pytest.mark.parametrize(
    "garbage",
    [b"\xff", b"\x08", b"\x08\x07", b"\x10\x00", b"", b"\x0a\x05hello"],
    ids=["bad-varint", "truncated", "no-entry", "no-ledger", "empty", "wrong-type"],
)
def test_deserialize_rejects_garbage(garbage: bytes) -> None:
    with pytest.raises(WireError):
        MessageId.deserialize(garbage)


def test_out_of_range_ids_do_not_encode() -> None:
    with pytest.raises(ValueError, match="int64"):
        MessageId(2**63, 0).serialize()


@given(ids)
def test_round_trip(message_id: MessageId) -> None:
    assert MessageId.deserialize(message_id.serialize()) == message_id
    assert MessageId.from_proto(message_id.to_proto()) == message_id


@given(int64s, int64s, int32s, int32s)
def test_serialize_is_byte_compatible_with_pulsar_client(ledger: int, entry: int, partition: int, batch: int) -> None:
    theirs = pulsar.MessageId(partition, ledger, entry, batch).serialize()
    assert MessageId(ledger, entry, partition, batch).serialize() == theirs
    assert MessageId.deserialize(theirs) == MessageId(ledger, entry, partition, batch)


@given(ids, ids)
def test_order_is_the_position_tuple(a: MessageId, b: MessageId) -> None:
    key = (a.ledger_id, a.entry_id, a.batch_index), (b.ledger_id, b.entry_id, b.batch_index)
    assert (a < b, a <= b, a > b, a >= b) == (key[0] < key[1], key[0] <= key[1], key[0] > key[1], key[0] >= key[1])


@settings(max_examples=500)
@given(st.binary(max_size=64))
def test_garbage_raises_only_wire_error(garbage: bytes) -> None:
    with contextlib.suppress(WireError):
        MessageId.deserialize(garbage)


def test_ack_sets_from_the_trace() -> None:
    # trace §5.3: [10] = 0b1010 delivers indexes 1 and 3 of 4; §5.4: [14] after acking index 0.
    assert ack_set_from_indexes([1, 3], 4) == [10]
    assert unacked_indexes([10], 4) == [1, 3]
    assert ack_set_from_indexes([1, 2, 3], 4) == [14]


def test_ack_set_words_are_signed_int64_lsb_first() -> None:
    assert ack_set_from_indexes([63], 64) == [-(2**63)]
    assert ack_set_from_indexes(range(64), 64) == [-1]
    assert ack_set_from_indexes([64], 65) == [0, 1]
    assert ack_set_from_indexes([], 100) == []
    assert unacked_indexes([-1, 1], 100) == [*range(64), 64]
    ack = pb.MessageIdData(ledgerId=1, entryId=1, ack_set=ack_set_from_indexes([63, 127], 128))
    assert pb.MessageIdData.FromString(ack.SerializeToString()).ack_set == ack.ack_set


def test_bits_beyond_the_batch_are_ignored_and_indexes_outside_refused() -> None:
    assert unacked_indexes([0b11111], 3) == [0, 1, 2]
    with pytest.raises(ValueError, match="outside"):
        ack_set_from_indexes([4], 4)


def java_to_long_array(indexes: set[int]) -> list[int]:
    """Reference: java.util.BitSet.toLongArray on one big integer."""
    bits = sum(1 << i for i in indexes)
    words = []
    while bits:
        word = bits & (2**64 - 1)
        words.append(word - 2**64 if word >= 2**63 else word)
        bits >>= 64
    return words


@given(st.integers(0, 300).flatmap(lambda n: st.tuples(st.just(n), st.sets(st.integers(0, max(n - 1, 0))))))
def test_ack_set_round_trip(case: tuple[int, set[int]]) -> None:
    size, unacked = case
    unacked = {i for i in unacked if i < size}
    words = ack_set_from_indexes(unacked, size)
    assert words == java_to_long_array(unacked)
    assert unacked_indexes(words, size) == sorted(unacked)


@given(st.integers(1, 300).flatmap(lambda size: st.tuples(st.just(size), st.sets(st.integers(0, size - 1)))))
def test_ack_sets_as_integers_say_what_their_words_say(case: tuple[int, set[int]]) -> None:
    """The integer form a transaction's acknowledgements are checked with: the same unacked
    indexes as the words, and the same words back (trailing zero words dropped)."""
    size, unacked = case
    words = ack_set_from_indexes(unacked, size)
    bits = ack_set_bits(words)
    assert set_bits(bits) == sorted(unacked) == unacked_indexes(words, size)
    assert ack_set_of_bits(bits) == words

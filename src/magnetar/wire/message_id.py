"""Message ids as the C++ client models, orders and serialises them (wire-protocol.md §6).

On the wire ``ledgerId``/``entryId`` are uint64, but Pulsar treats them as signed int64:
the earliest id is -1, which travels as 2^64-1. We keep the signed value everywhere in
Python and convert only at the protobuf boundary, so comparisons put EARLIEST first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

_U64 = 1 << 64
INT64_MAX = (1 << 63) - 1
_WORD_BITS = 64


def to_signed64(value: int) -> int:
    """The int64 a uint64 field carries: 2^64-1 is -1, Pulsar's "before the first"."""
    return value - _U64 if value > INT64_MAX else value


def _to_unsigned64(value: int) -> int:
    if not -(1 << 63) <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit in an int64")
    return value % _U64


@dataclass(frozen=True, slots=True)
class MessageId:
    """(ledger, entry, partition, batch index, batch size) of one message.

    Ordering follows the C++ ``MessageId::operator<``: ledger, entry, then batch index,
    so the whole entry (batch index -1) sorts before its first batch message. Partition
    takes no part in ordering (ids of different partitions are not comparable in Pulsar),
    but it does in equality, as in C++.
    """

    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1
    batch_size: int = 0

    @property
    def position(self) -> tuple[int, int, int]:
        """The sort key: where the message sits in its topic partition."""
        return (self.ledger_id, self.entry_id, self.batch_index)

    def __lt__(self, other: MessageId) -> bool:
        return self.position < other.position

    def __le__(self, other: MessageId) -> bool:
        return self.position <= other.position

    def __gt__(self, other: MessageId) -> bool:
        return self.position > other.position

    def __ge__(self, other: MessageId) -> bool:
        return self.position >= other.position

    def to_proto(self) -> pb.MessageIdData:
        """Only non-default optional fields are written, byte-compatible with C++ serialize()."""
        data = pb.MessageIdData(ledgerId=_to_unsigned64(self.ledger_id), entryId=_to_unsigned64(self.entry_id))
        if self.partition != -1:
            data.partition = self.partition
        if self.batch_index != -1:
            data.batch_index = self.batch_index
        if self.batch_size != 0:
            data.batch_size = self.batch_size
        return data

    @classmethod
    def from_proto(cls, data: pb.MessageIdData) -> MessageId:
        """Read a MessageIdData from any peer; absent optional fields take C++ defaults."""
        return cls(
            to_signed64(data.ledgerId),
            to_signed64(data.entryId),
            data.partition,
            data.batch_index,
            data.batch_size,
        )

    def serialize(self) -> bytes:
        """Bytes interchangeable with pulsar-client's ``MessageId.serialize()``."""
        return self.to_proto().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes | bytearray | memoryview) -> MessageId:
        """Inverse of ``serialize``; also accepts what the official client produces."""
        return cls.from_proto(parse_message_id_data(data))


EARLIEST = MessageId(-1, -1)
LATEST = MessageId(INT64_MAX, INT64_MAX)


def ack_set_from_indexes(unacked: Iterable[int], batch_size: int) -> list[int]:
    """Bitset words (Java ``BitSet.toLongArray`` layout) with a bit set per unacked index.

    Words are signed int64 because ``ack_set`` is ``repeated int64``; trailing zero words
    are dropped, as ``toLongArray`` does, so a fully acked batch gives ``[]``.
    """
    words = [0] * ((batch_size + _WORD_BITS - 1) // _WORD_BITS)
    for index in unacked:
        if not 0 <= index < batch_size:
            raise ValueError(f"batch index {index} outside a batch of {batch_size}")
        words[index // _WORD_BITS] |= 1 << (index % _WORD_BITS)
    while words and not words[-1]:
        words.pop()
    return [to_signed64(word) for word in words]


def unacked_indexes(ack_set: Sequence[int], batch_size: int) -> list[int]:
    """Batch indexes whose bit is set (still to deliver); bits beyond the batch are ignored.

    An empty ``ack_set`` gives ``[]``, but an absent ``CommandMessage.ack_set`` means
    "deliver everything": only the caller knows which of the two it holds.
    """
    return set_bits(ack_set_bits(ack_set) & ((1 << max(batch_size, 0)) - 1))


def ack_set_bits(ack_set: Sequence[int]) -> int:
    """An ack_set as one integer, bit i for batch index i (set: unacked). Words past the end
    are zero, as ``toLongArray`` drops them: the whole-batch questions a transaction's
    acknowledgement asks (which bits are cleared, do two sets overlap) then take a few word
    operations, not a walk over every index of a batch of thousands."""
    bits = 0
    for word_number, word in enumerate(ack_set):
        bits |= _to_unsigned64(word) << (word_number * _WORD_BITS)
    return bits


def ack_set_of_bits(bits: int) -> list[int]:
    """The ack_set words of `bits` (``ack_set_bits``'s inverse), trailing zero words dropped."""
    words = []
    while bits:
        words.append(to_signed64(bits & (_U64 - 1)))
        bits >>= _WORD_BITS
    return words


def set_bits(bits: int) -> list[int]:
    """The indexes of the bits set in `bits`, lowest first."""
    indexes = []
    while bits:
        low = bits & -bits
        indexes.append(low.bit_length() - 1)
        bits ^= low
    return indexes


def parse_message_id_data(data: bytes | bytearray | memoryview) -> pb.MessageIdData:
    """A serialized MessageIdData with its required fields checked: upb leaves `required`
    to us, and a missing ledger or entry would silently read 0."""
    message = pb.MessageIdData()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise WireError(f"garbage MessageIdData ({len(data)} bytes): {exc}") from exc
    if not (message.HasField("ledgerId") and message.HasField("entryId")):
        raise WireError("MessageIdData without ledgerId/entryId")
    return message

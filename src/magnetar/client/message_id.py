"""`MessageId` with the official client's interface, over the wire codec's id.

`pulsar.MessageId(partition, ledger_id, entry_id, batch_index)` exposes its parts as
methods, which the frozen `magnetar.wire.message_id.MessageId` cannot (its fields have
those names), so this is a thin wrapper: ordering, equality and `serialize()` bytes are
the C++ client's, and a chunked message keeps its first chunk's id as C++ and Java do
(`first_chunk_message_id` in the serialized form).
"""

from __future__ import annotations

from typing import Any, ClassVar

from magnetar.wire import message_id as wire


class MessageId:
    """Where a message is stored: (ledger, entry, partition, batch index); compares as C++ does.

    It holds its fields itself rather than a wire id: a producer or consumer makes one per
    message, and one object is half the cost of two.
    """

    __slots__ = ("_b", "_e", "_first_chunk", "_l", "_n", "_p", "_topic", "batch_acks")

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def __init__(self, partition: int = -1, ledger_id: int = -1, entry_id: int = -1, batch_index: int = -1,
                 batch_size: int = 0) -> None:
        self._l = ledger_id
        self._e = entry_id
        self._p = partition
        self._b = batch_index
        self._n = batch_size
        self._topic: str | None = None
        self._first_chunk: wire.MessageId | None = None
        self.batch_acks: Any = None
        """The consumer's record of which messages of this id's batch were acked (None: unknown)."""

    @classmethod
    def of(cls, wire_id: wire.MessageId, topic: str | None = None) -> MessageId:
        self = cls(wire_id.partition, wire_id.ledger_id, wire_id.entry_id, wire_id.batch_index, wire_id.batch_size)
        self._topic = topic
        return self

    # -- the official accessors
    def ledger_id(self) -> int:
        return self._l

    def entry_id(self) -> int:
        return self._e

    def batch_index(self) -> int:
        return self._b

    def partition(self) -> int:
        return self._p

    def batch_size(self) -> int:
        return self._n

    def topic_name(self) -> str | None:
        """The topic partition this id belongs to, when the client knows it (multi-topic acks)."""
        return self._topic

    @property
    def wire(self) -> wire.MessageId:
        return wire.MessageId(self._l, self._e, self._p, self._b, self._n)

    @property
    def first_chunk(self) -> wire.MessageId | None:
        """For a chunked message: the id of its first chunk (this id is the last chunk's)."""
        return self._first_chunk

    def serialize(self) -> bytes:
        """Bytes interchangeable with the official client's `MessageId.serialize()`."""
        data = self.wire.to_proto()
        if self._first_chunk is not None:
            data.first_chunk_message_id.CopyFrom(self._first_chunk.to_proto())
        return data.SerializeToString()

    @staticmethod
    def deserialize(data: bytes, topic: str | None = None) -> MessageId:
        """Inverse of `serialize`, also for the official client's bytes."""
        message = wire.parse_message_id_data(data)
        result = MessageId.of(wire.MessageId.from_proto(message), topic)
        if message.HasField("first_chunk_message_id"):
            result._first_chunk = wire.MessageId.from_proto(message.first_chunk_message_id)
        return result

    # -- comparisons: ledger, entry, batch index (C++ operator<); equality adds the partition
    def _key(self) -> tuple[int, int, int, int]:
        return (self._l, self._e, self._b, self._p)

    def _position(self) -> tuple[int, int, int]:
        return (self._l, self._e, self._b)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __lt__(self, other: MessageId) -> bool:
        return self._position() < other._position()

    def __le__(self, other: MessageId) -> bool:
        return self._position() <= other._position()

    def __gt__(self, other: MessageId) -> bool:
        return self._position() > other._position()

    def __ge__(self, other: MessageId) -> bool:
        return self._position() >= other._position()

    def __str__(self) -> str:
        return f"({self._l},{self._e},{self._p},{self._b})"

    def __repr__(self) -> str:
        return f"MessageId{self}"


MessageId.earliest = MessageId.of(wire.EARLIEST)
MessageId.latest = MessageId.of(wire.LATEST)


def as_message_id(value: Any) -> MessageId:
    """Accept our MessageId, a Message, or the official client's ids (pulsar.MessageId or _pulsar.MessageId)."""
    if isinstance(value, MessageId):
        return value
    message_id = getattr(value, "message_id", None)
    if callable(message_id):  # a Message, ours or the official client's
        return as_message_id(message_id())
    if hasattr(value, "serialize") and hasattr(value, "ledger_id"):
        return MessageId.deserialize(value.serialize())
    raise TypeError(f"not a message id: {value!r}")

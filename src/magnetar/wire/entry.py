"""The layout of a stored entry, read one layer at a time.

    [0x0e02][u32 size][BrokerEntryMetadata]   optional, written by the broker
    [0x0e01][u32 crc32c]                       optional, written by the producer
    [u32 size][MessageMetadata][payload]       always

Each function here reads only the layer it needs: peeking the broker-entry
prefix costs the same for a 1 KB and a 1 MB entry, reading MessageMetadata
never touches the payload, and only `verify_checksum` walks the payload (in C).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from magnetar.wire.checksum import crc32c
from magnetar.wire.errors import ChecksumError, WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_MAGIC_AND_SIZE = struct.Struct(">HI")
_PRODUCER_HEAD = struct.Struct(">HII")
"""Magic 0x0e01, CRC32C, MessageMetadata size: how an entry from a producer begins."""

Buffer = bytes | bytearray | memoryview
_M = TypeVar("_M", bound=Message)


@dataclass(slots=True)
class ParsedEntry:
    """All layers of an entry; `payload` is a view into the entry, never a copy."""

    broker_entry_metadata: pb.BrokerEntryMetadata | None
    checksum: int | None
    metadata: pb.MessageMetadata
    payload: memoryview


def _magic_at(entry: Buffer, offset: int) -> int | None:
    if len(entry) - offset < 2:
        return None
    return _U16.unpack_from(entry, offset)[0]


def broker_entry_metadata_end(entry: Buffer) -> int:
    """Offset just past the broker-entry prefix, 0 when the entry has none."""
    if _magic_at(entry, 0) != MAGIC_BROKER_ENTRY_METADATA:
        return 0
    if len(entry) < 6:
        raise WireError("entry ends inside its broker-entry-metadata header")
    size = _U32.unpack_from(entry, 2)[0]
    end = 6 + size
    if end > len(entry):
        raise WireError(f"broker entry metadata of {size} bytes runs past the entry ({len(entry)} bytes)")
    return end


def peek_broker_entry_metadata(entry: Buffer) -> pb.BrokerEntryMetadata | None:
    """Decode only the broker-entry prefix (PIP-70), whatever follows it."""
    end = broker_entry_metadata_end(entry)
    if not end:
        return None
    return _parse(pb.BrokerEntryMetadata, memoryview(entry)[6:end], "BrokerEntryMetadata")


def add_broker_entry_metadata(entry: Buffer, bem: pb.BrokerEntryMetadata) -> bytes:
    """Prepend a broker-entry prefix; the bytes behind it are not looked at."""
    body = bem.SerializeToString()
    return b"".join((_MAGIC_AND_SIZE.pack(MAGIC_BROKER_ENTRY_METADATA, len(body)), body, entry))


def strip_broker_entry_metadata(entry: Buffer) -> memoryview:
    """The entry as the producer sent it, without the broker's prefix."""
    return memoryview(entry)[broker_entry_metadata_end(entry) :]


def _checksum_span(entry: Buffer, offset: int) -> tuple[int | None, int]:
    """(stored checksum or None, offset of the metadata size field)."""
    if _magic_at(entry, offset) != MAGIC_CRC32C:
        return None, offset
    if len(entry) - offset < 6:
        raise WireError("entry ends inside its checksum")
    return _U32.unpack_from(entry, offset + 2)[0], offset + 6


def _metadata_span(entry: Buffer, offset: int) -> tuple[int, int]:
    """(start, end) of the MessageMetadata whose size field is at `offset`."""
    if len(entry) - offset < 4:
        raise WireError("entry ends before its metadata size")
    size = _U32.unpack_from(entry, offset)[0]
    start = offset + 4
    if size > len(entry) - start:
        raise WireError(f"metadata size {size} exceeds the {len(entry) - start} bytes left in the entry")
    return start, start + size


def _locate_metadata(entry: Buffer) -> tuple[int | None, int]:
    """(stored checksum or None, offset of the MessageMetadata size field). What producers
    send (a checksum, no broker prefix) is read with one unpack: this runs for every
    published message and every message a client reads."""
    if len(entry) >= _MAGIC_AND_SIZE.size:
        magic, stored = _MAGIC_AND_SIZE.unpack_from(entry, 0)
        if magic == MAGIC_CRC32C:
            return stored, _MAGIC_AND_SIZE.size
    return _checksum_span(entry, broker_entry_metadata_end(entry))


def _parse(cls: type[_M], data: Buffer, what: str) -> _M:
    try:
        msg = cls.FromString(data)  # a third cheaper than constructing, then parsing
    except DecodeError as exc:
        raise WireError(f"garbage {what} ({len(data)} bytes): {exc}") from exc
    return msg


_parse_metadata = pb.MessageMetadata.FromString


def _metadata_at(entry: Buffer, size_offset: int) -> tuple[pb.MessageMetadata, int]:
    """The MessageMetadata whose size field is at `size_offset`, and where it ends."""
    start, end = _metadata_span(entry, size_offset)
    return _required_metadata(entry[start:end]), end


def _required_metadata(data: Buffer) -> pb.MessageMetadata:
    """Parse MessageMetadata and insist on its required fields, which upb leaves to us."""
    try:  # not through _parse: this runs for every message published or read
        metadata = _parse_metadata(data)
    except DecodeError as exc:
        raise WireError(f"garbage MessageMetadata ({len(data)} bytes): {exc}") from exc
    if not metadata.IsInitialized():
        raise WireError(f"MessageMetadata lacks required fields: {', '.join(metadata.FindInitializationErrors())}")
    return metadata


def parse_message_metadata(entry: Buffer) -> pb.MessageMetadata:
    """Decode MessageMetadata, skipping the prefix and checksum, never the payload."""
    _, size_offset = _locate_metadata(entry)
    return _metadata_at(entry, size_offset)[0]


def parse_entry(entry: Buffer, *, verify: bool = False) -> ParsedEntry:
    """Every layer at once, for readers that want the messages; with `verify`, the CRC32C
    too (ChecksumError), each layer located once for both (`verify_checksum` first, then
    this, located them three times over: a client does it for every entry it receives)."""
    if (at := _producer_head_at(entry)) >= 0:  # what producers send: one unpack for the layers
        checksum, metadata, end = _producer_layers(entry, at, verify)
        bem_end = at
    else:
        bem_end = broker_entry_metadata_end(entry)
        checksum, size_offset = _checksum_span(entry, bem_end)
        if verify:
            _check_crc(entry, checksum, size_offset)
        metadata, end = _metadata_at(entry, size_offset)
    bem = _parse(pb.BrokerEntryMetadata, memoryview(entry)[6:bem_end], "BrokerEntryMetadata") if bem_end else None
    return ParsedEntry(bem, checksum, metadata, memoryview(entry)[end:])


def validate_layout(entry: Buffer) -> int:
    """Check the framing of an entry without decoding protobuf; return its message offset.

    This is what a broker can afford on every publish: sizes must agree with the
    bytes, so nothing malformed is stored for consumers to trip over later.
    """
    _, size_offset = _locate_metadata(entry)
    _metadata_span(entry, size_offset)
    return size_offset


#: The least room a message takes in a batch payload: its 4-byte size and a
#: SingleMessageMetadata holding the required payload_size (tag and one byte).
MIN_BATCHED_MESSAGE_BYTES = 6


def _producer_head_at(entry: Buffer) -> int:
    """Where a producer's [0x0e01][crc][metadata size] begins: 0, or just past a broker-entry
    prefix; -1 for any other layout (left to the general path and its errors)."""
    if len(entry) < _PRODUCER_HEAD.size:
        return -1
    magic, size = _MAGIC_AND_SIZE.unpack_from(entry, 0)
    if magic == MAGIC_CRC32C:
        return 0
    at = _MAGIC_AND_SIZE.size + size
    if magic == MAGIC_BROKER_ENTRY_METADATA and len(entry) - at >= _PRODUCER_HEAD.size and (
            _U16.unpack_from(entry, at)[0] == MAGIC_CRC32C):
        return at
    return -1


def _producer_layers(entry: Buffer, at: int, checksum: bool) -> tuple[int, pb.MessageMetadata, int]:
    """(stored CRC32C, MessageMetadata, where it ends) of what a producer sends, found at `at`
    (0, or just past the broker's prefix) by `_producer_head_at`; the CRC checked if `checksum`.
    Read without the general path's calls: this runs for every message published, every
    entry dispatched and every entry a client receives, and those calls were a third to a
    half of its cost."""
    _, stored, size = _PRODUCER_HEAD.unpack_from(entry, at)
    start = at + _PRODUCER_HEAD.size
    end = start + size
    if end > len(entry):
        raise WireError(f"metadata size {size} exceeds the {len(entry) - start} bytes left in the entry")
    if checksum:
        _check_crc(entry, stored, at + _MAGIC_AND_SIZE.size)
    return stored, _required_metadata(entry[start:end]), end


def validate_publishable(entry: Buffer, *, checksum: bool = False) -> pb.MessageMetadata:
    """Everything a broker can check about a published entry without opening its payload:
    the framing, a MessageMetadata that parses, and a message count the payload could hold;
    with `checksum`, the CRC32C too (ChecksumError), locating the layers once for both.
    Returns the metadata, parsed once."""
    if (at := _producer_head_at(entry)) >= 0:
        _, metadata, end = _producer_layers(entry, at, checksum)
    else:
        stored, size_offset = _locate_metadata(entry)
        if checksum and stored is not None:
            _check_crc(entry, stored, size_offset)
        metadata, end = _metadata_at(entry, size_offset)
    if metadata.HasField("num_messages_in_batch"):  # most messages are not batches
        _check_batch_count(metadata, len(entry) - end)
    return metadata


def _check_batch_count(metadata: pb.MessageMetadata, payload_size: int) -> None:
    """Raise WireError when a batch claims more messages than its payload can hold.

    Consumers size their work by num_messages_in_batch before reading the payload; the
    official client crashes on a batch claiming 2^31-1 messages in one byte.
    """
    count = metadata.num_messages_in_batch
    if metadata.properties and entry_format(metadata) != PULSAR_FORMAT:
        # A foreign payload (a Kafka record batch, Arrow IPC) packs messages its own way,
        # often far denser than 6 bytes each; the broker never parses it, so only the count's sign is checked.
        if count < 1:
            raise WireError(f"a {entry_format(metadata)} entry of {count} messages")
        return
    compressed = metadata.compression != pb.NONE
    size = metadata.uncompressed_size if compressed else payload_size
    if count < 1 or count > size // MIN_BATCHED_MESSAGE_BYTES:
        raise WireError(f"a batch of {count} messages cannot fit in {size} "
                        f"{'uncompressed ' if compressed else ''}payload bytes")


def verify_checksum(entry: Buffer) -> None:
    """Raise ChecksumError unless the stored CRC32C matches; entries without one pass."""
    checksum, size_offset = _locate_metadata(entry)
    _check_crc(entry, checksum, size_offset)


_COPY_BELOW = 4096


def _check_crc(entry: Buffer, checksum: int | None, size_offset: int) -> None:
    if checksum is None:
        return
    # A small entry is cheaper to slice (a copy) than to view; a large one is not copied.
    covered = entry[size_offset:] if len(entry) <= _COPY_BELOW else memoryview(entry)[size_offset:]
    actual = crc32c(covered)
    if actual != checksum:
        raise ChecksumError(f"checksum mismatch: entry says {checksum:#010x}, bytes give {actual:#010x}")


def has_checksum(entry: Buffer) -> bool:
    """Whether the producer wrote a CRC32C (clients below protocol v6 do not)."""
    return _magic_at(entry, broker_entry_metadata_end(entry)) == MAGIC_CRC32C


def build_entry(metadata: pb.MessageMetadata, payload: Buffer, *, checksum: bool = True) -> bytes:
    """Lay out an entry as a producer sends it, with the CRC32C the broker verifies."""
    return entry_of(metadata.SerializeToString(), payload, checksum=checksum)


def entry_of(body: bytes, payload: Buffer, *, checksum: bool = True) -> bytes:
    """`build_entry` from a MessageMetadata already serialised (`body`)."""
    head = _U32.pack(len(body)) + body
    if not checksum:
        return b"".join((head, payload))
    # the CRC runs on over the payload where it lies, so a large payload is copied once, into the entry
    crc = crc32c(payload, crc32c(head))
    return b"".join((_MAGIC_AND_SIZE.pack(MAGIC_CRC32C, crc), head, payload))


FORMAT_PROPERTY = "entry.format"
"""MessageMetadata property naming the payload's format when it is not Pulsar's batch format
(``kafka`` as Kafka-on-Pulsar writes it, ``arrow``); absent or ``pulsar`` means Pulsar's own."""

PULSAR_FORMAT = "pulsar"


def entry_format(metadata: pb.MessageMetadata) -> str:
    """The entry's payload format, read from MessageMetadata alone."""
    properties = metadata.properties
    if properties:  # most entries have none, and an empty loop costs twice this test
        for kv in properties:
            if kv.key == FORMAT_PROPERTY:
                return kv.value or PULSAR_FORMAT
    return PULSAR_FORMAT


def first_message_index(metadata: pb.MessageMetadata, last_index: int) -> int:
    """The PIP-70 index of an entry's first message, from its last's (the one the broker
    stamps in the prefix): less the batch's other messages."""
    count = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
    return last_index - count + 1

"""Batch payloads and the per-message view of an entry's payload (wire-protocol.md §2).

An uncompressed batch is ``n x [u32 smmSize][SingleMessageMetadata][value]``, where the
value length lives inside the SingleMessageMetadata (``payload_size``) and the batch index
is only the position. ``num_messages_in_batch`` in MessageMetadata is the only count, so
decoding checks that it agrees with the bytes exactly: a count that is off by one would
otherwise shift every message id a consumer acknowledges.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeAlias

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from magnetar.wire.compression import decompress
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

Buffer: TypeAlias = bytes | bytearray | memoryview

_U32 = struct.Struct(">I")

# The smallest message: a 4-byte size, then `payload_size = 0` (2 bytes), no value. Lets
# an absurd count fail before the loop starts instead of after it has run for a while.
_MIN_MESSAGE_BYTES = 6

# Fields of MessageMetadata that describe the message itself rather than the entry; a
# non-batched entry carries them there, a batch carries them per SingleMessageMetadata.
_PER_MESSAGE_FIELDS = (
    "partition_key",
    "partition_key_b64_encoded",
    "ordering_key",
    "event_time",
    "sequence_id",
    "null_value",
    "null_partition_key",
)


class BatchMessage(NamedTuple):
    """One message of an entry; ``index`` is its batch index, -1 for a non-batched entry.

    A NamedTuple because a 1000-message batch builds a thousand of these per entry and
    tuple construction is the cheapest immutable record Python has.
    """

    metadata: pb.SingleMessageMetadata
    value: memoryview
    index: int


def encode_batch(messages: Sequence[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    """Concatenate messages into an (uncompressed) batch payload.

    ``payload_size`` is always set from the value, on a copy, so the caller's metadata is
    left alone and can never disagree with the bytes.
    """
    parts: list[bytes] = []
    for metadata, value in messages:
        single = pb.SingleMessageMetadata()
        single.CopyFrom(metadata)
        single.payload_size = len(value)
        body = single.SerializeToString()
        parts += (_U32.pack(len(body)), body, value)
    return b"".join(parts)


def encode_varint(value: int) -> bytes:
    """Protobuf varint; negative int32/int64 values take ten bytes, as protobuf writes them."""
    if value < 0:
        value += 1 << 64
    if value < 0x80:
        return _BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_BYTE = [bytes((i,)) for i in range(256)]


def _length_delimited(tag: bytes, data: bytes) -> bytes:
    return tag + encode_varint(len(data)) + data


def encode_single_message(
    value: bytes,
    sequence_id: int | None = None,
    properties: dict[str, str] | None = None,
    partition_key: str | None = None,
    ordering_key: bytes | None = None,
    event_time: int | None = None,
    null_value: bool = False,
    key_b64: bool = False,
    null_key: bool = False,
) -> bytes:
    """One message of a batch, ``[u32 size][SingleMessageMetadata][value]``, without protobuf.

    A producer builds one of these per message, so it is the batching hot path: writing the
    few fields a producer sets by hand costs a fraction of building and serializing a
    protobuf message. Fields are written in field-number order, as protobuf serializes
    them, so the bytes equal ``SingleMessageMetadata.SerializeToString()`` (a test checks).
    """
    parts = []
    if properties:
        for key, val in properties.items():
            pair = _length_delimited(b"\x0a", key.encode()) + _length_delimited(b"\x12", val.encode())
            parts.append(_length_delimited(b"\x0a", pair))
    if partition_key is not None:
        parts.append(_length_delimited(b"\x12", partition_key.encode()))
    parts.append(b"\x18" + encode_varint(len(value)))
    if event_time:
        parts.append(b"\x28" + encode_varint(event_time))
    if key_b64:
        parts.append(b"\x30\x01")
    if ordering_key is not None:
        parts.append(_length_delimited(b"\x3a", ordering_key))
    if sequence_id is not None:
        parts.append(b"\x40" + encode_varint(sequence_id))
    if null_value:
        parts.append(b"\x48\x01")
    if null_key:
        parts.append(b"\x50\x01")
    metadata = b"".join(parts)
    return b"".join((_U32.pack(len(metadata)), metadata, value))


#: A batch whose messages average this many bytes or more is split into views of its payload;
#: smaller ones into bytes (see decode_batch).
_VIEWS_FROM_BYTES = 4096


def decode_batch(payload: Buffer, num_messages: int) -> list[BatchMessage]:
    """Split an uncompressed batch payload into its messages.

    This loop is the hot path of every consumer, so the common case pays for as little
    as possible: short input surfaces as struct.error / DecodeError and is translated
    once, outside the loop, and the rarer checks run only when a size looks suspicious.
    Small messages are sliced out of bytes: a bytes slice of 100 bytes costs a third of a
    memoryview slice, and a value is what `data()` hands out as bytes anyway. Large ones are
    views into ``payload``, never copied.
    """
    end = len(payload)
    if num_messages and end // num_messages >= _VIEWS_FROM_BYTES:
        view = memoryview(payload)
    else:
        view = payload if type(payload) is bytes else bytes(payload)
    if not 0 <= num_messages <= end // _MIN_MESSAGE_BYTES:
        raise WireError(f"batch of {end} bytes cannot hold {num_messages} messages")
    parse = pb.SingleMessageMetadata.FromString
    unpack = _U32.unpack_from
    # NamedTuple's generated __new__ is Python code; tuple.__new__ builds the same object in C.
    new = tuple.__new__
    messages: list[BatchMessage] = []
    append = messages.append
    offset = index = 0
    try:
        for index in range(num_messages):
            meta_start = offset + 4
            meta_end = meta_start + unpack(view, offset)[0]
            if meta_end > end:
                raise WireError(f"SingleMessageMetadata of message {index} runs past the batch")
            metadata = parse(view[meta_start:meta_end])
            size = metadata.payload_size
            offset = meta_end + size
            if size <= 0 or offset > end:
                _check_payload_size(metadata, index, end - meta_end)
            append(new(BatchMessage, (metadata, view[meta_end:offset], index)))
    except struct.error:
        raise WireError(f"batch ends before message {index} of {num_messages}") from None
    except DecodeError as exc:
        raise WireError(f"garbage SingleMessageMetadata in message {index}: {exc}") from exc
    if offset != end:
        raise WireError(f"{end - offset} bytes after the last of {num_messages} batch messages")
    return messages


def _check_payload_size(metadata: pb.SingleMessageMetadata, index: int, available: int) -> None:
    """Accept only a present ``payload_size = 0``; anything else here is an error."""
    # upb does not enforce `required`, so an absent field reads as 0; the C++ client
    # would reject such a batch.
    if not metadata.HasField("payload_size"):
        raise WireError(f"SingleMessageMetadata of message {index} has no payload_size")
    if metadata.payload_size != 0:
        raise WireError(f"message {index} claims {metadata.payload_size} bytes, batch has {available}")


def decompressed_payload(metadata: pb.MessageMetadata, payload: Buffer, *, max_size: int) -> Buffer:
    """The payload as the producer built it: decompressed iff ``compression`` is present."""
    if metadata.HasField("compression") and metadata.compression != pb.NONE:
        return decompress(metadata.compression, payload, metadata.uncompressed_size, max_size=max_size)
    return payload


def decode_messages(metadata: pb.MessageMetadata, payload: Buffer, *, max_size: int) -> list[BatchMessage]:
    """Every message of an entry, as a consumer sees them.

    Decisions follow field presence as the C++ consumer does: ``compression`` present ⇒
    decompress, ``num_messages_in_batch`` present ⇒ batch. A non-batched entry comes back
    as one message whose SingleMessageMetadata is filled from MessageMetadata, so callers
    read keys, properties and event times in one place whatever the producer did.
    Encrypted payloads must be decrypted by the caller first.
    """
    payload = decompressed_payload(metadata, payload, max_size=max_size)
    if metadata.HasField("num_messages_in_batch"):
        return decode_batch(payload, metadata.num_messages_in_batch)
    value = memoryview(payload)
    return [BatchMessage(_single_metadata_of(metadata, len(value)), value, -1)]


def _single_metadata_of(metadata: pb.MessageMetadata, size: int) -> pb.SingleMessageMetadata:
    single = pb.SingleMessageMetadata(payload_size=size)
    single.properties.extend(metadata.properties)
    for name in _PER_MESSAGE_FIELDS:
        if metadata.HasField(name):
            setattr(single, name, getattr(metadata, name))
    return single


def batch_header_offsets(payload: Buffer, num_messages: int, end: int | None = None) -> list[int] | None:
    """Where each message's u32 size starts, guessed for the common shape of a batch.

    The guess reads only the size's low byte and, when the SingleMessageMetadata starts with
    ``payload_size`` (no key, no properties), takes it as a one- or two-byte varint: what every
    client writes for under 256 bytes of metadata and 16 KiB of value. That keeps the
    per-message Python loop to a few byte lookups, which is what a columnar reader needs; the
    price is that the offsets are only a hypothesis: callers must check them against the
    decoded metadata (see `metadata_columns`) and fall back to `decode_batch` when they
    disagree. None when the guess visibly fails (runs off the end, or does not end exactly at it).
    `end` (default: the length) lets the batch be followed by bytes of the caller's in `payload`:
    indexing `bytes` is cheaper than indexing a memoryview, so a copy can pay for itself.
    """
    if end is None:
        end = len(payload)
    if not 0 < num_messages <= end // _MIN_MESSAGE_BYTES:
        return None
    offsets = [0] * num_messages
    offset = 0
    try:
        for index in range(num_messages):
            offsets[index] = offset
            if payload[offset + 4] == _PAYLOAD_SIZE_TAG:
                size = payload[offset + 5]
                if size > 127:
                    size = (size & 127) | (payload[offset + 6] << 7)
            else:  # a key or properties first: let upb find payload_size
                size = _payload_size_after(payload, offset)
            offset += 4 + payload[offset + 3] + size
    except (IndexError, DecodeError):
        return None
    return offsets if offset == end else None


_PAYLOAD_SIZE_TAG = 3 << 3  # field 3, varint


def _payload_size_after(payload: Buffer, offset: int) -> int:
    start = offset + 4
    size = pb.SingleMessageMetadata.FromString(payload[start : start + payload[offset + 3]]).payload_size
    if size < 0:  # offsets must only grow: callers cut buffers at them
        raise IndexError(size)
    return size


def _columns_descriptor(name: str) -> descriptor_pb2.DescriptorProto:
    """SingleMessageMetadata with every field repeated: parsing concatenated metadata yields columns."""
    message = descriptor_pb2.DescriptorProto()
    pb.SingleMessageMetadata.DESCRIPTOR.CopyToProto(message)
    message.name = name
    for field in message.field:
        field.label = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
        field.ClearField("default_value")
    return message


def _column_types() -> tuple[type[Message], type[Message]]:
    file = descriptor_pb2.FileDescriptorProto(
        name="magnetar/wire/batch_columns.proto", package="magnetar.wire.batch", dependency=[pb.DESCRIPTOR.name]
    )
    file.message_type.append(_columns_descriptor("MetadataColumns"))
    wrapper = file.message_type.add(name="MetadataList")
    wrapper.field.add(
        name="messages",
        number=1,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name="." + pb.SingleMessageMetadata.DESCRIPTOR.full_name,
    )
    pool = descriptor_pool.Default()
    pool.Add(file)
    columns = message_factory.GetMessageClass(pool.FindMessageTypeByName("magnetar.wire.batch.MetadataColumns"))
    wrapped = message_factory.GetMessageClass(pool.FindMessageTypeByName("magnetar.wire.batch.MetadataList"))
    return columns, wrapped


MetadataColumns, MetadataList = _column_types()
"""MetadataColumns: a batch's SingleMessageMetadata bytes back to back, parsed as one message, give
each field as a column in message order (one upb call instead of one per message). MetadataList:
the same metadata framed as a repeated field, which keeps each message's own values apart."""


class BatchMetadata(NamedTuple):
    """A batch's SingleMessageMetadata in bulk; trust `columns` only when `canonical`."""

    columns: Any
    """A MetadataColumns: one repeated field per SingleMessageMetadata field."""
    messages: Any
    """A MetadataList: `.messages` holds each message's own SingleMessageMetadata."""
    canonical: bool


def metadata_columns(concatenated: Buffer, framed: Buffer, num_messages: int) -> BatchMetadata | None:
    """Parse a batch's metadata once as columns and once as a list, and say whether columns are exact.

    `concatenated` is the messages' SingleMessageMetadata back to back; `framed` the same, each
    behind a field-1 tag and length (``MetadataList``). A column of a field that every message
    (or no message) has is exact when no message repeats a singular field, and the list proves
    that cheaply: upb writes each present field once, so re-serializing it gives back `framed`
    byte for byte only if nothing was repeated (or out of order). None when either does not
    parse, or the list does not hold `num_messages` messages.
    """
    try:
        messages = MetadataList.FromString(framed)
        columns = MetadataColumns.FromString(concatenated)
    except DecodeError:
        return None
    if len(messages.messages) != num_messages:
        return None
    return BatchMetadata(columns, messages, messages.SerializeToString() == framed)

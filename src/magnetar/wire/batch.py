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
from typing import NamedTuple, TypeAlias

from google.protobuf.message import DecodeError

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


def decode_batch(payload: Buffer, num_messages: int) -> list[BatchMessage]:
    """Split an uncompressed batch payload; values are views into ``payload``, not copies.

    This loop is the hot path of every consumer, so the common case pays for as little
    as possible: short input surfaces as struct.error / DecodeError and is translated
    once, outside the loop, and the rarer checks run only when a size looks suspicious.
    """
    view = memoryview(payload)
    end = len(view)
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

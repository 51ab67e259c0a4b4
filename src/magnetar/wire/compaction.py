"""Compacted entries, byte level (PIP-429): which messages of an entry survive, and the
rewritten entry that says so in its MessageMetadata.

A compacted batch keeps every slot of the original batch: a dropped message becomes a
placeholder (`compacted_out = true`, empty value) and the retained ones keep their exact
bytes, so `num_messages_in_batch` and every batch index stay as the producer made them.
`compacted_batch_indexes` (MessageMetadata field 31) lists the retained indexes, so the
last retained message of an entry is known from the metadata alone, encrypted or not.

Why placeholders and not a payload of the retained messages only (the PIP text's
layout): the official C++ client (v4.2) parses `num_messages_in_batch` slots, knows
neither field 31 nor `compacted_out`, and numbers messages by slot. A shorter payload
would be mis-parsed, a rewritten count would renumber the ids. The broker instead sends a
compacted entry with an `ack_set` whose bits are the retained indexes, which that client
honours by skipping the other slots.

Sans-IO: bytes in, bytes out.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection, Sequence
from typing import NamedTuple

from magnetar.wire.batch import decode_batch, decompressed_payload
from magnetar.wire.compression import compress
from magnetar.wire.entry import broker_entry_metadata_end, build_entry, has_checksum, parse_entry
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

Buffer = bytes | bytearray | memoryview
_U32 = struct.Struct(">I")


def _placeholder() -> bytes:
    single = pb.SingleMessageMetadata(payload_size=0, compacted_out=True)
    body = single.SerializeToString()
    return _U32.pack(len(body)) + body


#: What a dropped message of a compacted batch becomes: `[size][payload_size=0, compacted_out]`.
PLACEHOLDER = _placeholder()


class CompactionMessage(NamedTuple):
    """One message as compaction sees it: its batch index (-1 when the entry is not a
    readable batch), its key (None when it has none) and whether it deletes its key."""

    index: int
    key: str | None
    deletes: bool


def is_readable_batch(metadata: pb.MessageMetadata) -> bool:
    """A batch compaction can open: batched and not encrypted (nothing here decrypts)."""
    return metadata.HasField("num_messages_in_batch") and not metadata.encryption_keys


def retained_indexes(metadata: pb.MessageMetadata) -> list[int] | None:
    """The batch indexes a compactor kept (field 31), None on an entry it never rewrote."""
    return list(metadata.compacted_batch_indexes) if metadata.compacted_batch_indexes else None


def _key_of(message: pb.MessageMetadata | pb.SingleMessageMetadata) -> str | None:
    if not message.HasField("partition_key") or message.null_partition_key:
        return None
    return message.partition_key


def compaction_messages(metadata: pb.MessageMetadata, payload: Buffer, *, max_size: int) -> list[CompactionMessage]:
    """The live messages of an entry with their keys.

    A readable batch is opened (decompressed) and yields its messages, skipping slots an
    earlier compaction dropped (`compacted_out`, or absent from field 31). Anything else,
    an encrypted batch included, is one message keyed by MessageMetadata's partition_key:
    its size is `uncompressed_size` when present (an encrypted payload is never empty).
    """
    if not is_readable_batch(metadata):
        size = metadata.uncompressed_size if metadata.HasField("uncompressed_size") else len(payload)
        return [CompactionMessage(-1, _key_of(metadata), size == 0 or metadata.null_value)]
    kept = retained_indexes(metadata)
    wanted = set(kept) if kept is not None else None
    plain = decompressed_payload(metadata, payload, max_size=max_size)
    out: list[CompactionMessage] = []
    for single, _value, index in decode_batch(plain, metadata.num_messages_in_batch):
        if single.compacted_out or (wanted is not None and index not in wanted):
            continue
        out.append(CompactionMessage(index, _key_of(single), single.payload_size == 0 or single.null_value))
    return out


def _slots(plain: Buffer, count: int) -> list[memoryview]:
    """Each message's bytes `[size][SingleMessageMetadata][value]` of an uncompressed batch."""
    view = memoryview(plain)
    messages = decode_batch(view, count)  # validates the layout first
    out: list[memoryview] = []
    offset = 0
    for message in messages:
        end = offset + 4 + _U32.unpack_from(view, offset)[0] + message.metadata.payload_size
        out.append(view[offset:end])
        offset = end
    return out


def _rewrite(entry: Buffer, metadata: pb.MessageMetadata, payload: Buffer) -> bytes:
    """The entry with new metadata and payload; its broker-entry prefix copied unchanged,
    a CRC32C written iff the original had one."""
    prefix = bytes(memoryview(entry)[: broker_entry_metadata_end(entry)])
    return prefix + build_entry(metadata, payload, checksum=has_checksum(entry))


def mark_retained(entry: Buffer, indexes: Sequence[int]) -> bytes:
    """The entry unchanged but for field 31 = `indexes`: for a batch that keeps all its
    live messages, or an encrypted batch kept whole. The payload is not looked at."""
    parsed = parse_entry(entry)
    metadata = parsed.metadata
    del metadata.compacted_batch_indexes[:]
    metadata.compacted_batch_indexes.extend(sorted(indexes))
    return _rewrite(entry, metadata, parsed.payload)


def with_payload(entry: Buffer, indexes: Sequence[int], payload: Buffer) -> bytes:
    """The entry with field 31 = `indexes` and `payload` for its own: a foreign-format batch
    (PIP-96) that its format's code rewrote to hold only those messages."""
    metadata = parse_entry(entry).metadata
    del metadata.compacted_batch_indexes[:]
    metadata.compacted_batch_indexes.extend(sorted(indexes))
    return _rewrite(entry, metadata, payload)


def rebatch(entry: Buffer, keep: Collection[int], *, max_size: int) -> bytes | None:
    """A readable batch with only the messages at `keep` left (placeholders elsewhere),
    recompressed with its codec; None when nothing is kept."""
    parsed = parse_entry(entry)
    metadata = parsed.metadata
    count = metadata.num_messages_in_batch
    indexes = sorted(i for i in keep if 0 <= i < count)
    if not indexes:
        return None
    plain = decompressed_payload(metadata, parsed.payload, max_size=max_size)
    wanted = set(indexes)
    body = b"".join(slot if i in wanted else PLACEHOLDER for i, slot in enumerate(_slots(plain, count)))
    if metadata.HasField("compression") and metadata.compression != pb.NONE:
        metadata.uncompressed_size = len(body)
        payload = compress(metadata.compression, body)
    else:
        payload = body
    del metadata.compacted_batch_indexes[:]
    metadata.compacted_batch_indexes.extend(indexes)
    return _rewrite(entry, metadata, payload)


def last_retained_index(metadata: pb.MessageMetadata, payload: Callable[[], Buffer] | None = None,
                        *, max_size: int = 0) -> int:
    """The batch index of an entry's last message a compacted reader can receive.

    From metadata alone (PIP-429): -1 for a non-batch or a batch of one, the last element
    of field 31, `num_messages_in_batch - 1` for an encrypted batch. Only an entry written
    by an older compactor (placeholders, no field 31) needs `payload` opened to find its
    last slot not `compacted_out`; without `payload` that raises WireError.
    """
    count = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 0
    if count <= 1:
        return -1
    if metadata.compacted_batch_indexes:
        return metadata.compacted_batch_indexes[-1]
    if metadata.encryption_keys:
        return count - 1
    if payload is None:
        raise WireError("a batch without compacted_batch_indexes needs its payload read")
    plain = decompressed_payload(metadata, payload(), max_size=max_size)
    for single, _value, index in reversed(decode_batch(plain, count)):
        if not single.compacted_out:
            return index
    raise WireError("every message of the compacted batch is compacted out")

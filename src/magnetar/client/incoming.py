"""From a MESSAGE frame's entry to the application's messages (sans-IO).

One pass per entry, as the C++ consumer does it: the broker-entry prefix (kept for
`Message.index()` and `broker_publish_time()`), the checksum, MessageMetadata, then the
payload, decrypted if `encryption_keys` are present, decompressed if `compression` is and
split if `num_messages_in_batch` is.
Messages the broker sent although they are already acknowledged (`ack_set` of a
redelivered batch) or that lie before the consumer's start position are left out here,
and counted, because their flow permits still have to go back to the broker.

Chunked messages (`chunk_id` present) are collected by `ChunkAssembler` until the last
chunk arrives, then decoded as one message whose id remembers the first chunk's.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from magnetar.client.enums import ConsumerCryptoFailureAction
from magnetar.client.message import EntryContext, Message, messages_of
from magnetar.formats.payload import EntryPayload, UnknownFormatError
from magnetar.formats.processor import ProcessorSet
from magnetar.wire.batch import BatchMessage, decode_batch, decompressed_payload
from magnetar.wire.entry import PULSAR_FORMAT, ParsedEntry, entry_format, parse_entry
from magnetar.wire.errors import ChecksumError
from magnetar.wire.message_id import MessageId as WireId
from magnetar.wire.message_id import unacked_indexes
from magnetar.wire.proto import pulsar_api_pb2 as pb


class StartFilter(NamedTuple):
    """Drop messages before `position` (or at it, unless `inclusive`): a reader's start or a seek target."""

    ledger: int
    entry: int
    batch_index: int
    inclusive: bool

    def keeps(self, ledger: int, entry: int, batch_index: int) -> bool:
        if (ledger, entry) != (self.ledger, self.entry):
            return (ledger, entry) > (self.ledger, self.entry)
        if self.batch_index < 0:
            return self.inclusive
        return batch_index > self.batch_index or (self.inclusive and batch_index == self.batch_index)


class BatchAcks:
    """Which messages of one received batch the application acknowledged (batch-index acks off)."""

    __slots__ = ("acked", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.acked: set[int] = set()

    def ack(self, index: int) -> bool:
        """Record an ack; True once every message of the batch is acked."""
        self.acked.add(index)
        return len(self.acked) >= self.size

    def unacked(self) -> list[int]:
        return [i for i in range(self.size) if i not in self.acked]


class Decoded(NamedTuple):
    messages: list[Message]
    skipped: int
    """Messages of the entry not handed to the application (permits to give back)."""
    validation_error: int | None = None
    """The entry must be acknowledged away with this CommandAck.ValidationError (a broken
    checksum, or an undecryptable entry under crypto_failure_action=DISCARD)."""
    undecryptable: bool = False
    """The entry is encrypted and no key of the consumer opens it (whatever the action)."""


Decrypt = Callable[[pb.MessageMetadata, memoryview], bytes | None]
"""An entry's payload decrypted (client.crypto's Decryptor), None when no key opens it."""


def decode_entry(owner: Any, topic: str, command: pb.CommandMessage, payload: bytes, *, max_size: int,
                 start: StartFilter | None = None, track_batch_acks: bool = True,
                 chunks: ChunkAssembler | None = None, skip_compacted_out: bool = False,
                 processors: ProcessorSet | None = None, decrypt: Decrypt | None = None,
                 crypto_failure_action: int = ConsumerCryptoFailureAction.FAIL) -> Decoded:
    """The messages of one entry, as Message objects ready for the receiver queue.

    `skip_compacted_out`: leave out the placeholders compaction leaves in batches (as the
    Java client does; the C++ client delivers them as empty messages). Only compacted reads
    can meet them, so other consumers skip the per-message check.
    `processors` (PIP-96) read entries of other formats; an entry in Pulsar's format takes the
    path it takes without them unless a catch-all processor wants every entry.
    An encrypted entry is decrypted first (each chunk of a chunked message on its own), by
    `decrypt`; when that cannot be done, `crypto_failure_action` says what becomes of it.
    Raises PayloadError for an entry no processor reads or its processor refuses.
    """
    try:
        parsed = parse_entry(payload, verify=True)
    except ChecksumError:
        return Decoded([], 1, pb.CommandAck.ChecksumMismatch)
    metadata = parsed.metadata
    body = parsed.payload
    if metadata.encryption_keys:
        plain = None if decrypt is None else decrypt(metadata, body)
        if plain is None:
            return _undecryptable(owner, topic, command, parsed, start, crypto_failure_action)
        body = memoryview(plain)
    mid = command.message_id
    ledger, entry, partition = mid.ledgerId, mid.entryId, mid.partition
    redelivery = command.redelivery_count
    if metadata.HasField("chunk_id") and metadata.num_chunks_from_msg > 1 and chunks is not None:
        whole = chunks.add(metadata, body, WireId(ledger, entry, partition))
        if whole is None:
            return Decoded([], 1)
        first_id, chunk_ids, data = whole
        ctx = EntryContext(owner, topic, metadata, parsed.broker_entry_metadata, redelivery, 0, ledger, entry,
                           partition, chunk_ids)
        ctx.first_chunk = first_id
        value = decompressed_payload(metadata, data, max_size=max_size)
        return Decoded([Message.of(ctx, None, value)], 0)
    bem = parsed.broker_entry_metadata
    processed = _processed(bem, metadata, body, processors, max_size) if processors is not None or \
        metadata.properties else None
    if processed is None and not metadata.HasField("num_messages_in_batch"):
        if start is not None and not start.keeps(ledger, entry, -1):
            return Decoded([], 1)
        ctx = EntryContext(owner, topic, metadata, bem, redelivery, 0, ledger, entry, partition)
        value = decompressed_payload(metadata, body, max_size=max_size)
        return Decoded([Message.of(ctx, None, value)], 0)
    size = metadata.num_messages_in_batch
    if processed is not None:
        batch = processed
    else:
        batch = decode_batch(decompressed_payload(metadata, body, max_size=max_size), size)
    wanted: set[int] | None = set(unacked_indexes(command.ack_set, size)) if len(command.ack_set) else None
    acks = BatchAcks(size) if track_batch_acks else None
    if acks is not None and wanted is not None:
        acks.acked.update(set(range(size)) - wanted)
    ctx = EntryContext(owner, topic, metadata, bem, redelivery, size, ledger, entry, partition, acks)
    if wanted is None and start is None and not skip_compacted_out:  # the common case: nothing to check
        return Decoded(messages_of(ctx, batch), 0)
    messages = []
    append = messages.append
    for single, value, index in batch:
        if skip_compacted_out and single.compacted_out:
            continue
        if wanted is not None and index not in wanted:
            continue
        if start is not None and not start.keeps(ledger, entry, index):
            if acks is not None:
                acks.acked.add(index)
            continue
        append(Message.of(ctx, single, value, index))
    return Decoded(messages, size - len(messages))


def _undecryptable(owner: Any, topic: str, command: pb.CommandMessage, parsed: ParsedEntry,
                   start: StartFilter | None, action: int) -> Decoded:
    """An encrypted entry no key opens. FAIL: not delivered, not acknowledged; DISCARD:
    acknowledged away; CONSUME: delivered as stored, as one message (a batch too, as the
    official clients deliver it: its data the ciphertext of the whole batch, its fields the
    entry's, its id the entry's) whose encryption_context() holds what decrypting it takes.
    A chunk is delivered on its own, as the Java client does, since each chunk has its own
    nonce and only chunk by chunk can it be decrypted later."""
    if action != ConsumerCryptoFailureAction.CONSUME:
        error = pb.CommandAck.DecryptionError if action == ConsumerCryptoFailureAction.DISCARD else None
        return Decoded([], 1, error, True)
    metadata = parsed.metadata
    mid = command.message_id
    last = metadata.num_messages_in_batch - 1 if metadata.HasField("num_messages_in_batch") else -1
    if start is not None and not start.keeps(mid.ledgerId, mid.entryId, last):
        return Decoded([], 1)
    ctx = EntryContext(owner, topic, metadata, parsed.broker_entry_metadata,
                       command.redelivery_count, 0, mid.ledgerId, mid.entryId, mid.partition)
    ctx.decryption_failed = True
    return Decoded([Message.of(ctx, None, bytes(parsed.payload))], 0, None, True)


def _processed(bem: pb.BrokerEntryMetadata | None, metadata: pb.MessageMetadata, body: memoryview,
               processors: ProcessorSet | None, max_size: int) -> Sequence[BatchMessage] | None:
    """The entry's messages by its format's processor; None for Pulsar's format read the usual way."""
    fmt = entry_format(metadata)
    if fmt == PULSAR_FORMAT and (processors is None or processors.catch_all is None):
        return None
    if processors is None:
        raise UnknownFormatError(fmt, ())
    payload = memoryview(decompressed_payload(metadata, body, max_size=max_size))
    return processors.messages(EntryPayload(bem, metadata, payload, fmt))


class ChunkAssembler:
    """Chunks of messages in progress, by uuid; the oldest is dropped past `max_pending`."""

    def __init__(self, max_pending: int = 10, expire_seconds: float = 60.0) -> None:
        self.max_pending = max_pending
        self.expire_seconds = expire_seconds
        self._pending: OrderedDict[str, tuple[list[bytes], list[WireId], float]] = OrderedDict()

    def add(self, metadata: pb.MessageMetadata, payload: memoryview, chunk_id: WireId
            ) -> tuple[WireId, list[WireId], bytes] | None:
        """Returns (first chunk id, every chunk's id, the whole payload) on the last chunk."""
        uuid = metadata.uuid
        now = time.monotonic()
        if metadata.chunk_id == 0:
            self._pending.pop(uuid, None)
            self._pending[uuid] = ([], [], now)
            while len(self._pending) > self.max_pending:
                self._pending.popitem(last=False)
        state = self._pending.get(uuid)
        if state is None or len(state[0]) != metadata.chunk_id:
            self._pending.pop(uuid, None)  # out of order or its start was lost: give up on it
            return None
        state[0].append(bytes(payload))
        state[1].append(chunk_id)
        if metadata.chunk_id < metadata.num_chunks_from_msg - 1:
            return None
        del self._pending[uuid]
        return state[1][0], state[1], b"".join(state[0])

    def expire(self) -> None:
        deadline = time.monotonic() - self.expire_seconds
        while self._pending:
            uuid, (_, _, started) = next(iter(self._pending.items()))
            if started > deadline:
                return
            del self._pending[uuid]

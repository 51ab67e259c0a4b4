"""A consumer's intake: MESSAGE frames into receiver-queue items, on the event loop.

One `Intake` per single-topic consumer, which owns it and points the connection's MESSAGE
frames at its `on_message`. It decodes each entry into messages (payload processors for
other formats, the start position, chunked messages), or, once `receive_arrow` was called,
queues it raw (`RawEntry`) after the checks that need the consumer's state, and the
application's thread builds columns from it. It keeps the start position and the chunks in
progress; it reaches back to the consumer through the calls it is given (write a frame,
give back permits of messages it dropped) and tells the consumer's `Redelivery` what it
queued.

Failed entries: an entry no processor reads, or whose processor refuses it, reaches the
application as one `EntryFailure` raised by receive/receive_arrow (the next call goes on);
a corrupt one is discarded as the Java client discards it (acknowledged with a validation
error), one in an unknown format is left unacknowledged for a reader that has its processor.
An encrypted entry no key of the consumer opens goes as `crypto_failure_action` says (left
unacknowledged, acknowledged away with DecryptionError, or delivered sealed); encrypted
entries always take the message path, which decrypts them, even under receive_arrow.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.client.columnar import EntryFailure, RawEntry, RowAcks
from magnetar.client.enums import ConsumerCryptoFailureAction
from magnetar.client.incoming import BatchAcks, ChunkAssembler, Decrypt, StartFilter, decode_entry
from magnetar.formats.payload import PayloadError, UnknownFormatError
from magnetar.wire import client_commands as cc
from magnetar.wire.entry import parse_message_metadata, verify_checksum
from magnetar.wire.errors import ChecksumError
from magnetar.wire.message_id import MessageId as WireId
from magnetar.wire.message_id import unacked_indexes
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.client.aio.consumer_config import ConsumerConfig, ReceiveQueue
    from magnetar.client.aio.redelivery import Redelivery

log = logging.getLogger(__name__)

MAX_UNCOMPRESSED = 64 * 1024 * 1024
"""Largest decompressed payload accepted (a batch or a reassembled chunked message)."""
UNDECRYPTABLE_LOG_EVERY = 1000
"""Entries no key opens are logged the first time and then once in so many (a consumer
without the key would otherwise log every message of the topic)."""


class Intake:
    def __init__(self, owner: Any, topic: str, consumer_id: int, config: ConsumerConfig, queue: ReceiveQueue,
                 redelivery: Redelivery, row_acks: RowAcks, *, loop: asyncio.AbstractEventLoop,
                 write: Callable[[bytes], bool], permits_used: Callable[[int], None],
                 after_read: Callable[[Callable[[], None]], None]) -> None:
        self._owner = owner
        """The consumer: messages, raw entries and failures name it, for acks and permits."""
        self._topic = topic
        self._consumer_id = consumer_id
        self._config = config
        """Shared with the consumer (and a multi-topic consumer's siblings): `columnar` flips in it."""
        self._queue = queue
        self._redelivery = redelivery
        self._watch = redelivery.received if redelivery.watching else None
        self._acked_off_loop = redelivery.acked_off_loop
        self._row_acks = row_acks
        self._loop = loop
        self._threaded = queue.threaded
        self._write = write
        self._permits_used = permits_used
        self._after_read = after_read
        """Runs a callable once the connection's read being dispatched is (ReceiveQueue.put_from_read)."""
        self._chunks = ChunkAssembler(config.max_pending_chunked_message)
        self._decrypt = _decryptor(config)
        self._undecryptable_count = 0
        self.start: StartFilter | None = None
        """Messages before it are dropped (a reader's start, a seek target); cleared once passed."""

    def on_message(self, message: pb.CommandMessage, payload: bytes) -> None:
        config = self._config
        if config.columnar and self._queue_raw(message, payload):
            return
        try:
            decoded = decode_entry(self._owner, self._topic, message, payload, max_size=MAX_UNCOMPRESSED,
                                   start=self.start, track_batch_acks=not config.batch_index_ack_enabled,
                                   chunks=self._chunks, skip_compacted_out=config.is_read_compacted,
                                   processors=config.payload_processors, decrypt=self._decrypt,
                                   crypto_failure_action=config.crypto_failure_action)
        except PayloadError as exc:
            self._entry_failed(message.message_id.ledgerId, message.message_id.entryId, exc)
            return
        except ValueError as exc:
            log.warning("%s: dropping undecodable entry %s: %s", self._topic, message.message_id, exc)
            self._write(cc.ack(self._consumer_id, [WireId(message.message_id.ledgerId,
                                                          message.message_id.entryId).to_proto()],
                               validation_error=pb.CommandAck.BatchDeSerializeError))
            self._permits_used(1)
            return
        if decoded.validation_error is not None:
            mid = message.message_id
            self._write(cc.ack(self._consumer_id, [WireId(mid.ledgerId, mid.entryId).to_proto()],
                               validation_error=decoded.validation_error))
        if decoded.undecryptable:
            self._undecryptable(message)
        messages = decoded.messages
        if messages:
            if self.start is not None:
                self.start = None  # the position is passed: later redeliveries are not filtered
            watch = self._watch
            if watch is not None:
                watch(message, messages)
            elif self._acked_off_loop:  # waiting nacks: application threads' acks are taken in here too
                self._redelivery.apply_acks()
            self._queue.put_from_read(messages, self._after_read)
        if decoded.skipped:
            self._permits_used(decoded.skipped)

    # -- failures
    def _undecryptable(self, message: pb.CommandMessage) -> None:
        """Say so (and where) for an entry no key opened; under FAIL the unacked-message timeout,
        when set, brings it back (as the Java client's tracker does) for a key that may come."""
        mid = message.message_id
        action = ConsumerCryptoFailureAction(self._config.crypto_failure_action)
        self._undecryptable_count += 1
        if self._undecryptable_count % UNDECRYPTABLE_LOG_EVERY == 1:  # the first, then one in so many
            log.warning("%s: entry %d:%d is encrypted and %s opens it: %s (%d such entries so far)", self._topic,
                        mid.ledgerId, mid.entryId,
                        "no key of the crypto_key_reader" if self._decrypt is not None else "no crypto_key_reader",
                        {ConsumerCryptoFailureAction.FAIL: "left unacknowledged (FAIL)",
                         ConsumerCryptoFailureAction.DISCARD: "acknowledged away (DISCARD)",
                         ConsumerCryptoFailureAction.CONSUME: "delivered encrypted (CONSUME)"}[action],
                        self._undecryptable_count)
        if action == ConsumerCryptoFailureAction.FAIL:
            self._redelivery.held(mid.ledgerId, mid.entryId)

    def entry_unreadable(self, ledger: int, entry: int, exc: Exception, discard: bool) -> None:
        """Log a failed entry; discard it (ack with a validation error) unless it is only unknown.
        Any thread: the reader's thread finds failures while it builds columns."""
        log.warning("%s: entry %d:%d not readable: %s", self._topic, ledger, entry, exc)
        if not discard:
            return
        frame = cc.ack(self._consumer_id, [WireId(ledger, entry).to_proto()],
                       validation_error=pb.CommandAck.BatchDeSerializeError)
        if self._threaded:
            self._loop.call_soon_threadsafe(self._write, frame)
        else:
            self._write(frame)

    def _entry_failed(self, ledger: int, entry: int, exc: Exception) -> None:
        """Hand the failure to the application in the queue, in order with messages."""
        self.entry_unreadable(ledger, entry, exc, discard=not isinstance(exc, UnknownFormatError))
        self._queue.put_many([EntryFailure(self._owner, ledger, entry, exc)])

    # -- columnar intake
    def _queue_raw(self, message: pb.CommandMessage, payload: bytes) -> bool:
        """Queue the entry raw for receive_arrow; False to have it decoded into messages instead."""
        mid = message.message_id
        ledger, entry = mid.ledgerId, mid.entryId
        try:
            verify_checksum(payload)
            metadata = parse_message_metadata(payload)
        except (ChecksumError, ValueError):
            return False  # the message path answers corrupt entries as it always did
        if metadata.encryption_keys or (metadata.HasField("chunk_id") and metadata.num_chunks_from_msg > 1):
            return False  # decrypted (or not) and joined on the message path
        batched = metadata.HasField("num_messages_in_batch")
        size = metadata.num_messages_in_batch if batched else 0
        keep = self._kept_indexes(message, ledger, entry, size)
        total = max(size, 1)
        count = total if keep is None else len(keep)
        if total - count:
            self._permits_used(total - count)
        if not count:
            return True
        self.start = None
        self._redelivery.received_raw(ledger, entry)
        if batched and self._row_acks.durable:
            acks = BatchAcks(size)
            if keep is not None:
                acks.acked.update(set(range(size)) - set(keep))
            self._row_acks.track(ledger, entry, acks)
        self._queue.put_many([RawEntry(self._owner, ledger, entry, payload, keep, count, size)])
        return True

    def _kept_indexes(self, message: pb.CommandMessage, ledger: int, entry: int, size: int) -> set[int] | None:
        """The batch indexes to hand out; None for all of them."""
        indexes = range(size) if size else [-1]
        keep = None
        if size and len(message.ack_set):
            keep = set(unacked_indexes(message.ack_set, size))
        start = self.start
        if start is not None:
            kept = {i for i in indexes if start.keeps(ledger, entry, i)}
            keep = kept if keep is None else keep & kept
        if keep is not None and len(keep) == len(indexes):
            return None
        return keep


def _decryptor(config: ConsumerConfig) -> Decrypt | None:
    """The consumer's Decryptor when it has a key reader; `cryptography` loads only then."""
    if config.crypto_key_reader is None:
        return None
    from magnetar.client.crypto.message_crypto import Decryptor  # noqa: PLC0415 (see above)

    return Decryptor(config.crypto_key_reader).decrypt

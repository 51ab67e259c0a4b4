"""The consumer's side of payload processors and `receive_arrow` (mixed into Consumer).

Failed entries: an entry no processor reads, or whose processor refuses it, reaches the
application as one `EntryFailure` raised by receive/receive_arrow (the next call goes on);
a corrupt one is discarded as the Java client discards it (acknowledged with a validation
error), one in an unknown format is left unacknowledged for a reader that has its processor.

Columnar intake: once `receive_arrow` was called the loop queues raw entries (`RawEntry`)
after the checks that need the consumer's state, and the reader builds columns from them.
"""

from __future__ import annotations

import logging
from typing import Any

from magnetar.client.columnar import EntryFailure, RawEntry
from magnetar.client.incoming import BatchAcks, StartFilter
from magnetar.client.message_id import MessageId
from magnetar.formats.processor import UnknownFormatError
from magnetar.wire import client_commands as cc
from magnetar.wire.entry import parse_message_metadata, verify_checksum
from magnetar.wire.errors import ChecksumError
from magnetar.wire.message_id import MessageId as WireId
from magnetar.wire.message_id import unacked_indexes
from magnetar.wire.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)


class ConsumerIntake:
    topic: str
    config: Any
    queue: Any
    _start: StartFilter | None
    _threaded: bool
    _loop: Any
    _unacked_timer: Any
    _unacked: dict
    _row_acks: dict

    def _write(self, frame: bytes) -> bool: ...
    def _permits_used(self, count: int) -> None: ...
    def _ack(self, ledger: int, entry: int, index: int, size: int, acks: Any) -> None: ...

    # -- failures
    def entry_unreadable(self, ledger: int, entry: int, exc: Exception, discard: bool) -> None:
        """Log a failed entry; discard it (ack with a validation error) unless it is only unknown."""
        log.warning("%s: entry %d:%d not readable: %s", self.topic, ledger, entry, exc)
        if not discard:
            return
        frame = cc.ack(getattr(self, "consumer_id", 0), [WireId(ledger, entry).to_proto()],
                       validation_error=pb.CommandAck.BatchDeSerializeError)
        if self._threaded:
            self._loop.call_soon_threadsafe(self._write, frame)
        else:
            self._write(frame)

    def _entry_failed(self, ledger: int, entry: int, exc: Exception) -> None:
        """On the loop: hand the failure to the application in the queue, in order with messages."""
        self.entry_unreadable(ledger, entry, exc, discard=not isinstance(exc, UnknownFormatError))
        self.queue.put_many([EntryFailure(self, ledger, entry, exc)])

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
        if metadata.HasField("chunk_id") and metadata.num_chunks_from_msg > 1:
            return False
        batched = metadata.HasField("num_messages_in_batch") and not metadata.encryption_keys
        size = metadata.num_messages_in_batch if batched else 0
        keep = self._kept_indexes(message, ledger, entry, size)
        total = max(size, 1)
        count = total if keep is None else len(keep)
        if total - count:
            self._permits_used(total - count)
        if not count:
            return True
        self._start = None
        if self._unacked_timer is not None:
            self._unacked[(ledger, entry)] = 0.0
        if batched and self.config.durable:
            acks = BatchAcks(size)
            if keep is not None:
                acks.acked.update(set(range(size)) - set(keep))
            self._row_acks[(ledger, entry)] = acks
        self.queue.put_many([RawEntry(self, ledger, entry, payload, keep, count, size)])
        return True

    def _kept_indexes(self, message: pb.CommandMessage, ledger: int, entry: int, size: int) -> set[int] | None:
        """The batch indexes to hand out; None for all of them."""
        indexes = range(size) if size else [-1]
        keep = None
        if size and len(message.ack_set):
            keep = set(unacked_indexes(message.ack_set, size))
        start = self._start
        if start is not None:
            kept = {i for i in indexes if start.keeps(ledger, entry, i)}
            keep = kept if keep is None else keep & kept
        if keep is not None and len(keep) == len(indexes):
            return None
        return keep

    def keep_row_acks(self, ledger: int, entry: int, acks: BatchAcks) -> None:
        """Track the rows of an entry decoded into messages before the first receive_arrow,
        as a raw entry's are tracked (only a durable subscription acknowledges by row)."""
        if self.config.durable:
            self._row_acks.setdefault((ledger, entry), acks)

    def ack_row_cumulative(self, ledger: int, entry: int, index: int) -> None:
        """Cumulative acknowledgement up to one row; the entry's batch size (kept while its rows are
        not all acked) tells whether the row ends its entry."""
        acks = self._row_acks.get((ledger, entry))
        size = 0 if acks is None or index < 0 else acks.size
        self.acknowledge_cumulative(MessageId(-1, ledger, entry, index, size))

    def ack_rows(self, ledger: int, entry: int, indexes: list[int]) -> None:
        """Acknowledge the rows of one entry (from receive_arrow's ledger_id/entry_id/batch_index)."""
        acks = self._row_acks.get((ledger, entry))
        if acks is None or indexes[0] < 0:
            self._ack(ledger, entry, -1, 0, None)
            return
        acks.acked.update(indexes[:-1])
        if len(acks.acked | {indexes[-1]}) >= acks.size:
            self._row_acks.pop((ledger, entry), None)
        self._ack(ledger, entry, indexes[-1], acks.size, acks)

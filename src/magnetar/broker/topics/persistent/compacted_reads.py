"""Compacted reads: what a `read_compacted` consumer is sent, and what GetLastMessageId
and seek by time answer it.

Such a consumer reads the compacted ledger up to the horizon, then the topic after it.
A compacted batch goes out with an `ack_set` whose bits are its retained indexes (field
31, intersected with what the subscription acknowledged), so the official client skips
the placeholder slots as it skips acknowledged ones; the payload is never opened here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.topics.consumer import DispatchEntry
from magnetar.storage import Position
from magnetar.wire.message_id import MessageId, ack_set_from_indexes, unacked_indexes
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic


def restrict_to_retained(entry: DispatchEntry) -> None:
    """Narrow a compacted entry's ack_set and message count to its retained messages."""
    metadata = entry.metadata
    if metadata is None or not metadata.compacted_batch_indexes or not metadata.HasField("num_messages_in_batch"):
        return
    size = metadata.num_messages_in_batch
    retained = set(metadata.compacted_batch_indexes)
    if entry.ack_set:
        retained &= set(unacked_indexes(entry.ack_set, size))
    if not retained:  # every retained message is acknowledged: nothing should have been read
        retained = set(metadata.compacted_batch_indexes)
    kept = sorted(i for i in retained if 0 <= i < size)
    entry.ack_set = ack_set_from_indexes(kept, size)
    entry.num_messages = max(len(kept), 1)


class CompactedReader:
    """Mixed into the Exclusive/Failover dispatcher: reads the compacted ledger for a
    `read_compacted` active consumer while its read position is within the horizon.

    The compacted ledger outlives the topic's ledgers under it once they are trimmed, so
    its oldest entries can sit below the topic's first position, where a cursor cannot
    stand. As Pulsar's `readFromEarliest`, a consumer starting with nothing acknowledged
    reads the compacted ledger from its first entry; from there the dispatcher continues
    entry by entry in the compacted ledger (`_compacted_next`), not through the topic's
    positions, which jump over the trimmed ledgers.
    """

    _compacted_from_earliest = False
    _compacted_next: tuple[Position, Position] | None = None
    """(where the topic would continue, where the compacted ledger continues) after a run."""

    def _restart_compacted_view(self) -> None:
        """The read position went back to the cursor (a new active consumer, a redelivery,
        a seek): start from the compacted ledger's first entry if nothing is acknowledged."""
        self._compacted_next = None
        cursor = self.subscription.cursor  # type: ignore[attr-defined]
        self._compacted_from_earliest = cursor.mark_delete_position.entry_id < 0

    def _compacted_start(self, start: Position) -> Position:
        topic: PersistentTopic = self.subscription.topic  # type: ignore[attr-defined]
        if self._compacted_from_earliest:
            self._compacted_from_earliest = False
            first = topic.ledger.first_position
            if first is None or start <= first:
                return Position(-1, -1)
        if self._compacted_next is not None and start == self._compacted_next[0]:
            return self._compacted_next[1]
        return start

    def _compacted_horizon(self) -> Position | None:
        active = getattr(self, "active", None)
        if active is None or not active.read_compacted:
            return None
        topic: PersistentTopic = self.subscription.topic  # type: ignore[attr-defined]
        return topic.compaction_service.last_compacted_position()

    def _read_stored(self, start: Position, count: int, max_bytes: int) -> list[tuple[Position, bytes | None]]:
        horizon = self._compacted_horizon()
        self._compacted_positions: set[Position] = set()
        if horizon is None:
            return super()._read_stored(start, count, max_bytes)  # type: ignore[misc]
        topic: PersistentTopic = self.subscription.topic  # type: ignore[attr-defined]
        compacted_start = self._compacted_start(start)
        if compacted_start <= horizon:
            run = topic.compaction_service.read_compacted_entries(compacted_start, count)
            if run:
                self._compacted_positions = {position for position, _data in run}
                last = run[-1][0]
                self._compacted_next = (topic.ledger.next_position(last), Position(last.ledger_id, last.entry_id + 1))
                return run  # type: ignore[return-value]
        self._compacted_next = None
        if start <= horizon:
            start = self.read_position = topic.ledger.next_position(horizon)  # type: ignore[attr-defined]
        return super()._read_stored(start, count, max_bytes)  # type: ignore[misc]

    def _deliverable(self, position: Position) -> bool:
        """A compacted entry below the topic's first position is older than anything the
        cursor can mark: only what is out with a consumer holds it back."""
        if position in getattr(self, "_compacted_positions", ()):
            first = self.subscription.topic.ledger.first_position  # type: ignore[attr-defined]
            if first is None or position < first:
                return position not in self.outstanding  # type: ignore[attr-defined]
        return super()._deliverable(position)  # type: ignore[misc]

    def _entry(self, position: Position, data: bytes | None) -> DispatchEntry | None:
        entry = super()._entry(position, data)  # type: ignore[misc]
        if entry is not None and position in getattr(self, "_compacted_positions", ()):
            restrict_to_retained(entry)
        return entry


def compacted_last_message_id(topic: PersistentTopic) -> pb.MessageIdData | None:
    """GetLastMessageId for a compacted reader when the horizon covers the whole topic:
    the last message it can receive, from the compacted ledger's last MessageMetadata.
    None when the topic has a tail after the horizon (or was never compacted): the
    topic's own last id is then the answer."""
    service = topic.compaction_service
    horizon = service.last_compacted_position()
    if horizon is None:
        return None
    last = topic.ledger.last_confirmed_position
    if last is not None and last > horizon:
        return None
    found = service.last_message_position()
    return MessageId(found.ledger_id, found.entry_id, topic.partition, found.batch_index).to_proto()


def compacted_position_by_time(topic: PersistentTopic, timestamp: int) -> Position:
    """Seek by time on the compacted view: the first compacted entry at or after the time,
    else the first entry of the topic after the horizon at or after it."""
    service = topic.compaction_service
    horizon = service.last_compacted_position()
    in_topic = topic.find_position_by_time(timestamp)
    if horizon is None:
        return in_topic
    found = service.find_position_by_publish_time(timestamp)
    if found is not None:
        return found
    return max(in_topic, topic.ledger.next_position(horizon))
